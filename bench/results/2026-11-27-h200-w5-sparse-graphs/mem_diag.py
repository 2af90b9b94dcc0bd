"""Dev only: GPU memory during a long sparse prefill: allocated per 8 steps, then the largest live
allocations (with their Python frames) when the prompt is done or the process runs out."""
import sys, time, torch, collections
from kvspill.bench.engine_bench import _parse, setup_engine
from kvspill.sampling_params import SamplingParams
torch.cuda.memory._record_memory_history(max_entries=200000)
args = _parse(sys.argv[1:])
ctx = args.ctx[0]
bench = setup_engine(args, ctx + 400)
engine = bench.engine
print("after setup allocated GiB", round(torch.cuda.memory_allocated() / 2**30, 3), flush=True)
gen = torch.Generator().manual_seed(0)
prompt = torch.randint(0, engine.vocab_size, (ctx,), generator=gen).tolist()
engine.add_request(prompt, SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True, detokenize=False))
n = 0; t0 = time.perf_counter()
def dump():
    snap = torch.cuda.memory._snapshot()
    live = collections.Counter(); sizes = collections.Counter()
    for seg in snap["segments"]:
        for b in seg["blocks"]:
            if b["state"] != "active_allocated": continue
            fr = b.get("frames", [])
            key = " <- ".join(f'{f["filename"].split("/")[-1]}:{f["line"]}:{f["name"]}' for f in fr if "kvspill" in f["filename"])[:400]
            live[key] += 1; sizes[key] += b["size"]
    for k, s in sizes.most_common(10):
        print(round(s / 2**20, 1), "MiB", live[k], "blocks:", k, flush=True)
fired = []
def on_oom(device, alloc, device_alloc, device_free):
    if fired: return
    fired.append(1)
    print("OOM observer: alloc", alloc, "allocated GiB", round(torch.cuda.memory_allocated() / 2**30, 3), flush=True)
    dump(); print("=== end of OOM dump", flush=True)
torch._C._cuda_attach_out_of_memory_observer(on_oom)
try:
    while engine.has_unfinished_requests():
        engine.step(); n += 1
        if n % 16 == 0:
            print("step", n, "t", round(time.perf_counter() - t0, 1), "allocated GiB", round(torch.cuda.memory_allocated() / 2**30, 3), "reserved", round(torch.cuda.memory_reserved() / 2**30, 3), "max", round(torch.cuda.max_memory_allocated() / 2**30, 3), flush=True)
except Exception as e:
    print("FAILED", type(e).__name__, str(e)[:200], flush=True)
dump()

"""Dev only (issue 21): a real CUDA out-of-memory in a prefill step is retried with fewer tokens
per step, and the request ends with the tokens of a run that had the memory. W1 shape, one 16K
prompt in one 16K-token step; then all free GPU memory but a little is taken by a hog tensor."""
import sys, time, logging, torch
from kvspill.bench.engine_bench import _parse, setup_engine
from kvspill.sampling_params import SamplingParams
from kvspill.errors import StepError

logging.basicConfig(level=logging.WARNING)
argv = sys.argv[1:]
headroom = 400 * 2**20
if "--headroom-mib" in argv:
    i = argv.index("--headroom-mib"); headroom = int(float(argv[i + 1]) * 2**20); del argv[i:i + 2]
args = _parse(argv)
ctx = args.ctx[0]
engine = setup_engine(args, ctx + 64).engine
gen = torch.Generator().manual_seed(0)
prompt = torch.randint(0, engine.vocab_size, (ctx,), generator=gen).tolist()
params = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True, detokenize=False)

def run(tag):
    engine.add_request(prompt, params, req_id=tag)
    caps, out, t0, n = set(), None, time.perf_counter(), 0
    while engine.has_unfinished_requests():
        try:
            outs = engine.step()
        except StepError as e:
            print(f"{tag}: failed: {e}", flush=True); engine.abort_request(tag); return None
        for o in outs:
            if o.finished: out = o
        n += 1
        if engine.scheduler.oom_token_cap: caps.add(engine.scheduler.oom_token_cap)
    torch.cuda.synchronize()
    print(f"{tag}: {time.perf_counter()-t0:.2f} s, {n} steps, token caps seen {sorted(caps)}, "
          f"error {getattr(out, 'error', None)!r}, tokens {out.token_ids}", flush=True)
    return out.token_ids

ref = run("with-memory")
torch.cuda.empty_cache()
free = min(torch.cuda.mem_get_info()[0], int(args.cap_gib * 2**30) - torch.cuda.memory_reserved())
hog = torch.empty(free - headroom, dtype=torch.uint8, device="cuda")
print(f"hog {hog.numel()/2**30:.1f} GiB, free now {torch.cuda.mem_get_info()[0]/2**20:.0f} MiB", flush=True)
got = run("squeezed")
print("tokens equal:", got == ref, flush=True)
del hog
engine.close()

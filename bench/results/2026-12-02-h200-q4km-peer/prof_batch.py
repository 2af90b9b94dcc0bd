"""Pure decode steps of N sequences of CTX tokens, per N, one engine: step time and kernel table.
    PICKS=mma6_best.json|off python3 prof_batch.py SHAPE|FILE.gguf BUDGET CTX N [N ...]
PICKS: the Q6_K tensor-core configs mma6_sweep.py picked ({"Q6_K,T": MmaConfig fields}), put in
gguf_mma.MMA_CONFIGS before the engine loads."""
import json, os, sys, time, torch
from torch.profiler import ProfilerActivity, profile
from kvspill.kernels import gguf_mma
from kvspill.bench import concurrent_bench as cb
from kvspill.bench.engine_bench import setup_engine
from kvspill.sampling_params import SamplingParams

picks = os.environ.get("PICKS", "off")
if picks != "off" and os.path.exists(picks):
    for key, cfg in json.load(open(picks)).items():
        qtype, t = key.split(",")
        gguf_mma.MMA_CONFIGS[(qtype, int(t))] = gguf_mma.MmaConfig(**cfg)
print("MMA_CONFIGS", gguf_mma.MMA_CONFIGS, flush=True)
shape, budget, ctx, ns = sys.argv[1], sys.argv[2], int(sys.argv[3]), [int(a) for a in sys.argv[4:]]
src = ["--model", shape] if shape.endswith(".gguf") else ["--shape", shape]
args = cb._parse([*src, "--vram-budget", budget, "--ctx", str(ctx)])
engine = setup_engine(args, ctx + 200, max_num_seqs=max(8, *ns)).engine
gen = torch.Generator().manual_seed(5)
for n in ns:
    for _ in range(n):
        prompt = torch.randint(0, engine.vocab_size, (ctx,), generator=gen).tolist()
        engine.add_request(prompt, SamplingParams(temperature=0.0, max_tokens=int(os.environ.get("MAX_TOKENS", "100")), ignore_eos=True, detokenize=False))
    it = engine.run()
    while True:
        step = next(it)
        if sum(1 for o in step.outputs if len(o.delta_token_ids) == 1) == n and engine.scheduler.num_waiting == 0:
            break
    for _ in range(10):
        next(it)
    torch.cuda.synchronize(); t = time.perf_counter(); k = 30
    for _ in range(k):
        next(it)
    torch.cuda.synchronize(); dt = (time.perf_counter() - t) / k
    print(f"RESULT picks={picks} {os.path.basename(shape)} n={n} ctx={ctx}: step {dt*1e3:.3f} ms, {n/dt:.1f} tok/s in all", flush=True)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            next(it)
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=60), flush=True)
    for _ in it:
        pass

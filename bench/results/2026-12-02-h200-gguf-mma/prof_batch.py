"""Kernel table of pure decode steps of N sequences of CTX tokens: prof_batch.py SHAPE BUDGET N CTX"""
import sys, time, torch
from torch.profiler import ProfilerActivity, profile
from kvspill.bench import concurrent_bench as cb
from kvspill.bench.engine_bench import setup_engine
from kvspill.sampling_params import SamplingParams

shape, budget, n, ctx = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
args = cb._parse(["--shape", shape, "--vram-budget", budget, "--ctx", str(ctx)])
engine = setup_engine(args, ctx + 200, max_num_seqs=max(8, n)).engine
gen = torch.Generator().manual_seed(5)
for _ in range(n):
    prompt = torch.randint(0, engine.vocab_size, (ctx,), generator=gen).tolist()
    engine.add_request(prompt, SamplingParams(temperature=0.0, max_tokens=120, ignore_eos=True, detokenize=False))
it = engine.run()
while True:
    step = next(it)
    if sum(1 for o in step.outputs if len(o.delta_token_ids) == 1) == n and engine.scheduler.num_waiting == 0:
        break
for _ in range(20):
    next(it)
torch.cuda.synchronize(); t = time.perf_counter(); k = 40
for _ in range(k):
    next(it)
torch.cuda.synchronize(); dt = (time.perf_counter() - t) / k
print(f"{shape} n={n} ctx={ctx}: step {dt*1e3:.3f} ms, {n/dt:.1f} tok/s in all", flush=True)
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for _ in range(10):
        next(it)
    torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=22, max_name_column_width=70))
for _ in it:
    pass

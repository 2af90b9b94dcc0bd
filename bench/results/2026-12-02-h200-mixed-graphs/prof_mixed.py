"""Profile the mixed steps (2-3 requests decoding, a 256-token prefill chunk) of 8 x 2K requests
entering together: where the 17-50 ms of a floor-chunk mixed step go. Usage: prof_mixed.py SHAPE BUDGET"""
import json, os, sys, time
import torch
from torch.profiler import ProfilerActivity, profile
from kvspill.bench import concurrent_bench as cb
from kvspill.bench.engine_bench import setup_engine
from kvspill.sampling_params import SamplingParams

shape, budget = sys.argv[1], sys.argv[2]
OUT = os.environ.get("OUT", "/tmp")
args = cb._parse(["--shape", shape, "--vram-budget", budget, "--ctx", "2048", "--concurrency", "8"])
bench = setup_engine(args, 2300, max_num_seqs=64)
engine = bench.engine
cb.run_concurrent(engine, 512, 2, 4, 1, seed=0)
cb.run_concurrent(engine, 2048, 8, 16, 2, seed=1)  # warm every shape of this workload
gen = torch.Generator().manual_seed(5)
for _ in range(8):
    prompt = torch.randint(0, engine.vocab_size, (2048,), generator=gen).tolist()
    engine.add_request(prompt, SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True, detokenize=False))
it = engine.run()
started = 0
for i in range(4):  # the first step prefills 2 prompts; the next start the mixed steps
    step = next(it)
rows = []
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for i in range(4):
        t = time.perf_counter(); step = next(it); torch.cuda.synchronize()
        rows.append((round((time.perf_counter() - t) * 1e3, 2), round(step.seconds * 1e3, 2), engine.scheduler.prefill_token_cap))
for _ in it:
    pass
print(shape, "mixed steps (wall ms, step.seconds ms, cap):", rows)
ka = prof.key_averages()
print(ka.table(sort_by="cpu_time_total", row_limit=25, max_name_column_width=60))
print(ka.table(sort_by="cuda_time_total", row_limit=20, max_name_column_width=60))
prof.export_chrome_trace(f"{OUT}/mixed_{shape.replace(':','_')}.json")

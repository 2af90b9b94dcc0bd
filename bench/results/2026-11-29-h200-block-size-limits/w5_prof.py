"""Session 24: where a W5 sparse decode step's GPU time goes (kernel table over 8 steps), any engine_bench args."""
import sys, time
import torch
from torch.profiler import ProfilerActivity, profile
from kvspill.bench import engine_bench
from kvspill.sampling_params import SamplingParams

args = engine_bench._parse(sys.argv[1:])
ctx = args.ctx[0]
setup = engine_bench.setup_engine(args, ctx + 256)
engine = setup.engine
gen = torch.Generator().manual_seed(0)
prompt = torch.randint(0, engine.vocab_size, (ctx,), generator=gen).tolist()
engine.add_request(prompt, SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True, detokenize=False))
t0 = time.perf_counter(); n = 0; times = []
while n < 20:
    for out in engine.step():
        n += len(out.delta_token_ids)
        times.append(time.perf_counter())
print(f"prefill+20 tokens {time.perf_counter() - t0:.1f} s; last 10 steps {(times[-1] - times[-11]) / 10 * 1e3:.2f} ms/step")
steps = 8
with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
    t = time.perf_counter()
    for _ in range(steps):
        engine.step()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t) / steps
print(f"profiled wall {wall * 1e3:.2f} ms/step ({args.block_size}-token blocks)")
tot = 0.0
rows = []
for e in prof.key_averages():
    dt = getattr(e, "self_device_time_total", 0) or 0
    if dt > 0:
        rows.append((dt / steps / 1e3, e.count // steps, e.key[:90]))
rows.sort(reverse=True)
print(f"GPU kernel time per step: {sum(r[0] for r in rows):.2f} ms")
for ms, cnt, name in rows[:22]:
    print(f"  {ms:7.3f} ms  x{cnt:<5d} {name}")

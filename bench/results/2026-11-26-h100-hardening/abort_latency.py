"""Dev only (issue 21): how soon an abort takes effect during a long GPU prefill. The engine loop
checks aborts between steps, so the wait is the rest of the step in flight: report every step's
wall time during a 128K prefill (W3, 24 GiB + 18 GiB cpu tier), then abort mid-prefill and time
until the request is gone and its KV freed."""
import sys, time, torch
from kvspill.bench.engine_bench import _parse, setup_engine
from kvspill.sampling_params import SamplingParams

args = _parse(sys.argv[1:])
ctx = args.ctx[0]
engine = setup_engine(args, ctx + 64).engine
gen = torch.Generator().manual_seed(0)
prompt = torch.randint(0, engine.vocab_size, (ctx,), generator=gen).tolist()
params = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True, detokenize=False)
engine.add_request(prompt, params, req_id="full")
steps, t_first = [], None
t0 = time.perf_counter()
while engine.has_unfinished_requests():
    s = time.perf_counter(); outs = engine.step(); steps.append(time.perf_counter() - s); order = list(steps)
    if t_first is None and any(o.delta_token_ids for o in outs): t_first = time.perf_counter() - t0
print("longest steps (index, ms):", sorted(((round(t * 1e3), i) for i, t in enumerate(order)), reverse=True)[:6])
steps.sort()
print(f"prefill of {ctx}: ttft {t_first:.2f} s, {len(steps)} steps, step p50 {steps[len(steps)//2]*1e3:.0f} ms, "
      f"p99 {steps[int(len(steps)*0.99)]*1e3:.0f} ms, max {steps[-1]*1e3:.0f} ms", flush=True)
for frac in (0.1, 0.3, 0.5, 0.7, 0.9):
    engine.add_request(prompt, params, req_id=f"abort{frac}")
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < frac * t_first:
        engine.step()
    a = time.perf_counter()
    engine.abort_request(f"abort{frac}")
    while engine.has_unfinished_requests():
        engine.step()
    torch.cuda.synchronize()
    print(f"abort at {frac:.0%} of the prefill: all work done {(time.perf_counter() - a)*1e3:.0f} ms after it", flush=True)
engine.close()

"""Dev only: profile sparse decode steps at 128K (W5), print top CUDA and CPU ops and step times."""
import sys, time, torch
from torch.profiler import profile, ProfilerActivity
from kvspill.bench.engine_bench import _parse, setup_engine
from kvspill.sampling_params import SamplingParams

import os
if os.environ.get("ROT") == "linear":  # dev: the int8 basis change as F.linear (TN GEMM) instead of x @ H
    import torch.nn.functional as F
    import kvspill.runner.attention as att
    att.rotate = lambda x, r: F.linear(x.float(), r)
elif os.environ.get("ROT") == "flat":
    import kvspill.runner.attention as att
    att.rotate = lambda x, r: (x.float().reshape(-1, r.shape[0]) @ r).view(*x.shape[:-1], r.shape[0])
if os.environ.get("EAGER"):  # dev: no CUDA graphs (shapes of every op show in the profile)
    import kvspill.engine_setup as es
    es._capture_graphs = lambda *a, **k: None
PROF_AT = int(os.environ.get("PROF_AT", 30))
args = _parse(sys.argv[1:])
ctx = args.ctx[0]
bench = setup_engine(args, ctx + 200)
engine = bench.engine
gen = torch.Generator().manual_seed(0)
prompt = torch.randint(0, engine.vocab_size, (ctx,), generator=gen).tolist()
engine.add_request(prompt, SamplingParams(temperature=0.0, max_tokens=int(os.environ.get("NTOK", 72)), ignore_eos=True, detokenize=False))
t0 = time.perf_counter(); n = 0; times = []
while engine.has_unfinished_requests():
    outs = engine.step()
    k = sum(len(o.delta_token_ids) for o in outs)
    if k:
        n += k; times.append(time.perf_counter())
    if n == 1: print("ttft", round(times[0] - t0, 2), flush=True)
    if n == PROF_AT:
        torch.cuda.synchronize(); t1 = time.perf_counter()
        if os.environ.get("CPROF"):
            import cProfile, pstats
            cp = cProfile.Profile(); cp.enable()
            for _ in range(8):
                engine.step()
            torch.cuda.synchronize(); cp.disable()
            t2 = time.perf_counter()
            print("cprofiled 8 steps", round((t2 - t1) / 8 * 1e3, 2), "ms/step", flush=True)
            st = pstats.Stats(cp); st.sort_stats("tottime").print_stats(45); st.sort_stats("cumulative").print_stats(60)
            n += 8
            continue
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=bool(os.environ.get('SHAPES'))) as prof:
            for _ in range(8):
                engine.step()
            torch.cuda.synchronize()
        t2 = time.perf_counter()
        print("profiled 8 steps", round((t2 - t1) / 8 * 1e3, 2), "ms/step", flush=True)
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=30, max_name_column_width=60))
        if os.environ.get("SHAPES"):
            print("BY SHAPE")
            print(prof.key_averages(group_by_input_shape=True).table(sort_by="cpu_time_total", row_limit=25, max_name_column_width=40, max_shapes_column_width=90))
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=60))
        n += 8
d = [b - a for a, b in zip(times[5:PROF_AT-1], times[6:PROF_AT])]
print("decode ms/step p50", round(sorted(d)[len(d)//2] * 1e3, 2), "mean", round(sum(d)/len(d)*1e3, 2), "tok/s", round(len(d)/sum(d), 2))
cold = engine.kv_stats().runner.cold
print("sparse seconds (host)", cold.sparse_seconds if cold else None, "steps", cold.num_steps if cold else None)
engine.close()

"""Dev only: sparse decode with and without its CUDA graphs in one engine (same prefill length):
tok/s, greedy tokens equal, graph captures/replays, sparse cache hits."""
import sys, time, json, os, torch
from kvspill.bench.engine_bench import _parse, setup_engine
from kvspill.sampling_params import SamplingParams
if os.environ.get("CAND_BITS"):
    import kvspill.kernels.block_select as _bs
    _bs._CAND_BITS = int(os.environ["CAND_BITS"]); print("cand_bits", _bs._CAND_BITS, flush=True)

args = _parse(sys.argv[1:])
ctx = args.ctx[0]
bench = setup_engine(args, ctx + 400)
engine = bench.engine
runner = engine.runner
sg = runner.sparse_graphs
print("sparse graphs:", sg is not None, flush=True)
gen = torch.Generator().manual_seed(0)
prompt = torch.randint(0, engine.vocab_size, (ctx,), generator=gen).tolist()
res = {}
for mode in os.environ.get("MODES", "graph eager").split():
    runner.sparse_graphs = sg if mode == "graph" else None
    cache = runner.cold.sparse_cache
    c0 = int(cache.copied_blocks) if cache is not None else 0
    s0 = runner.cold.stats.sparse.selected_blocks
    engine.add_request(prompt, SamplingParams(temperature=0.0, max_tokens=args.new_tokens, ignore_eos=True, detokenize=False))
    t0 = time.perf_counter(); times = []; toks = []; profiled = False
    while engine.has_unfinished_requests():
        for o in engine.step():
            for t in o.delta_token_ids:
                toks.append(t); times.append(time.perf_counter())
        if os.environ.get("PROFILE") and mode == "graph" and len(toks) >= 24 and not profiled:
            from torch.profiler import profile, ProfilerActivity
            torch.cuda.synchronize(); profiled = True
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(8):
                    engine.step()
                torch.cuda.synchronize()
            print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=70), flush=True)
            times = times[:8]; toks_before = len(toks)
    d = [b - a for a, b in zip(times[8:-1], times[9:])]
    d.sort()
    sel = runner.cold.stats.sparse.selected_blocks - s0
    copied = (int(cache.copied_blocks) - c0) if cache is not None else None
    res[mode] = toks
    print(json.dumps({"mode": mode, "ctx": ctx, "kv": args.kv_cache_dtype, "ttft_s": round(times[0] - t0, 2),
        "decode_tok_s": round(len(d) / sum(d), 2), "p50_ms": round(d[len(d)//2] * 1e3, 2), "max_ms": round(d[-1] * 1e3, 2),
        "captures": sg.num_captures if sg else None, "replays": sg.num_replays if sg else None,
        "selected_blocks": sel, "copied_blocks": copied, "tokens16": toks[:16]}), flush=True)
if len(res) == 2:
    a, b = res.values()
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    print("tokens equal:", a == b, "first difference at", first, flush=True)
engine.close()

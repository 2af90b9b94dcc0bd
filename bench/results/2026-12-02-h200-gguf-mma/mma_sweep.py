"""Sweep the tensor-core GGUF kernel's configs on the 8B shapes; compare with the current paths.
Stage 1: the grid on 3 shapes x T in (8, 64) [and 2, 32 for the top ones]; stage 2: the best configs with
split K on all shapes and T in 2..64, against quant_linear's current path and a dense bf16 matmul.
Writes $OUT/mma_stage1.jsonl, mma_stage2.jsonl and mma_best.json."""
import itertools, json, os, sys, time
import torch
from kvspill.bench.kernels_gguf import SHAPES, _bench_ms, _copies, copy_ceiling_gbps, random_weight_cuda
from kvspill.kernels import gguf_mma
from kvspill.kernels.gguf_mma import MmaConfig, quant_matmul_mma
from kvspill.kernels.quant_linear import quant_linear, quant_linear_path

OUT = os.environ.get("OUT", "/tmp")
T0 = time.time()
BUDGET_S = float(sys.argv[1]) if len(sys.argv) > 1 else 300
ceiling = copy_ceiling_gbps()
print(f"ceiling {ceiling:.0f} GB/s", flush=True)
_cache = {}


def weights(qtype, shape):
    key = (qtype, shape)
    if key not in _cache:
        _cache.clear()
        torch.cuda.empty_cache()
        _cache[key] = _copies(random_weight_cuda(qtype, *SHAPES[shape]))
    return _cache[key]


def time_fn(fn, ws, x):
    import triton.testing
    fn(x, ws[0])
    torch.cuda.synchronize()
    def step():
        for w in ws:
            fn(x, w)
    us = float(triton.testing.do_bench_cudagraph(step, rep=20, return_mode="median")) * 1e3 / len(ws)
    return us, ws[0].nbytes / us / 1e3


def mma_fn(cfg):
    return lambda x, w: quant_matmul_mma(x, w, config=cfg)


_ref = {}


def run(qtype, shape, t, cfg):
    ws = weights(qtype, shape)
    x = torch.randn((t, ws[0].in_features), dtype=torch.bfloat16, device="cuda", generator=torch.Generator(device="cuda").manual_seed(t))
    key = (qtype, shape, t)
    if key not in _ref:
        from kvspill.kernels.gguf_dequant import dequantize
        _ref.clear()
        _ref[key] = x.float() @ dequantize(ws[0], torch.float32).t()
    try:
        err = float((quant_matmul_mma(x, ws[0], config=cfg).float() - _ref[key]).abs().max() / _ref[key].abs().max())
        us, gbs = time_fn(mma_fn(cfg), ws, x)
    except Exception as e:  # noqa: BLE001
        return dict(err=str(e)[:120])
    if err > 2e-2:
        return dict(err=f"wrong result: rel {err:.3g}")
    return dict(us=round(us, 2), gbs=round(gbs), pct=round(100 * gbs / ceiling, 1), rel_err=round(err, 5))


def baseline(qtype, shape, t):
    ws = weights(qtype, shape)
    x = torch.randn((t, ws[0].in_features), dtype=torch.bfloat16, device="cuda")
    path = quant_linear_path(x, ws[0])
    us, gbs = time_fn(lambda x, w: quant_linear(x, w), ws, x)
    return dict(path=path, us=round(us, 2), gbs=round(gbs), pct=round(100 * gbs / ceiling, 1))


grid = [MmaConfig(bn, nw, 1, True, 1, 3, mg) for bn, mg, nw in itertools.product((32, 64, 128, 16), (True, False), (2, 4))]
print(len(grid), "configs", flush=True)
stage1 = {}
with open(f"{OUT}/mma_stage1.jsonl", "w") as f:
    for qtype in ("Q4_K",):
        for cfg in grid:
            if time.time() - T0 > BUDGET_S * 0.55:
                break
            for t in (8, 64):
                for shape in ("qkv", "gate_up", "down"):
                    r = run(qtype, shape, t, cfg)
                    stage1.setdefault((qtype, t, cfg), []).append(r.get("us", 1e9))
                    f.write(json.dumps(dict(qtype=qtype, shape=shape, t=t, cfg=cfg.__dict__, **r)) + "\n"); f.flush()
best = {}
for qtype in ("Q4_K",):
    for t in (8, 64):
        cand = sorted(((sum(v), c) for (q, tt, c), v in stage1.items() if q == qtype and tt == t and len(v) == 3), key=lambda z: z[0])
        best[(qtype, t)] = [c for _, c in cand[:2]]
        print(qtype, t, "top", [(round(s, 1), c) for s, c in cand[:4]], flush=True)
LAYERS = dict(qkv=32, o=32, gate_up=32, down=32, lm_head=1)
SMALL = ("qkv", "o", "down")
picked = {}
with open(f"{OUT}/mma_stage2.jsonl", "w") as f:
    for qtype in ("Q4_K",):
        for t in (4, 8, 16, 32, 64):
            if time.time() - T0 > BUDGET_S:
                break
            tops = best.get((qtype, 8 if t <= 16 else 64)) or []
            base_total, totals = 0.0, {}
            for shape in SHAPES:
                base = baseline(qtype, shape, t)
                base_total += LAYERS[shape] * base["us"]
                rec = dict(qtype=qtype, shape=shape, t=t, base=base, mma=[])
                for cfg in tops:
                    got = []
                    for sk in ((1, 2, 4) if shape in SMALL else (1,)):
                        c = MmaConfig(cfg.block_n, cfg.num_warps, sk, cfg.scale_after, cfg.unroll, cfg.num_stages, cfg.magic)
                        r = run(qtype, shape, t, c)
                        got.append((r.get("us", 1e9), sk))
                        rec["mma"].append(dict(cfg=c.__dict__, **r))
                    us, sk = min(got)
                    tot = totals.setdefault(cfg, [0.0, {}])
                    tot[0] += LAYERS[shape] * us
                    tot[1][shape] = sk
                print(json.dumps(rec), flush=True)
                f.write(json.dumps(rec) + "\n"); f.flush()
            if totals:
                cfg, (tot, splits) = min(totals.items(), key=lambda z: z[1][0])
                split_small = max(set(splits[s] for s in SMALL), key=[splits[s] for s in SMALL].count)
                picked[f"{qtype}:{t}"] = dict(cfg=dict(cfg.__dict__, split_k=split_small), step_us=round(tot, 1), base_step_us=round(base_total, 1), splits=splits)
                print("PICK", qtype, t, picked[f"{qtype}:{t}"], flush=True)
json.dump(picked, open(f"{OUT}/mma_best.json", "w"), indent=1)
print("done", round(time.time() - T0), "s")

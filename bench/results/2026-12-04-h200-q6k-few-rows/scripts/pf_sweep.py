"""One-token int16-x Q4_K / Q6_K kernels with PREFETCH against today's configs, on the shapes of a
Llama-3.1-8B Q4_K_M file, one bf16 token; writes every timing and the per-shape picks.
    python3 .devbench/s47/pf_sweep.py OUT_DIR
"""
import json, os, sys, time
import torch
from kvspill.bench.kernels_gguf import _copies, random_weight_cuda, time_rotating_us, copy_ceiling_gbps
from kvspill.kernels import gguf_gemv
from kvspill.kernels.gguf_dequant import dequantize

Q4_SHAPES = {"qkv": (6144, 4096), "qk": (5120, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)}
Q6_SHAPES = {"v": (1024, 4096), "down": (4096, 14336), "lm_head": (128256, 4096)}
Q4_CONFIGS = ["today"] + [c + (True,) for c in [(512, 4, 1), (512, 8, 1), (512, 8, 2), (1024, 4, 1), (1024, 8, 1), (1024, 8, 2),
              (1024, 16, 2), (1024, 16, 4), (2048, 8, 2), (2048, 8, 4), (2048, 16, 4), (1024, 4, 2), (512, 16, 2)]] + [(1024, 8, 2), (1024, 8, 1)]
Q6_CONFIGS = ["today", (512, 2, 1, True), (512, 4, 1, True), (512, 4, 2, True), (512, 8, 2, True), (512, 8, 4, True),
              (512, 16, 4, True), (512, 1, 1, True), (1024, 2, 1), (512, 4, 1)]
RULE4, RULE6 = gguf_gemv.Q4K_INT16X_CONFIGS, gguf_gemv.Q6K_INT16X_CONFIG


def fn_for(qtype, cfg):
    def fn(x, w):
        out = torch.empty((1, w.out_features), dtype=x.dtype, device=x.device)
        if qtype == "Q4_K":
            gguf_gemv.Q4K_INT16X_CONFIGS = RULE4 if cfg == "today" else ((0, 0, cfg),)
            gguf_gemv._launch_q4k_one_token(x, w, None, out)
        else:
            gguf_gemv.Q6K_INT16X_CONFIG = RULE6 if cfg == "today" else cfg
            gguf_gemv._launch_q6k_int16x(x, w, None, out)
        return out
    return fn


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    ceiling = copy_ceiling_gbps()
    print(f"ceiling {ceiling:.0f} GB/s", flush=True)
    log = open(f"{out_dir}/pf_sweep.jsonl", "a")
    picks = {}
    for qtype, shapes, configs in (("Q4_K", Q4_SHAPES, Q4_CONFIGS), ("Q6_K", Q6_SHAPES, Q6_CONFIGS)):
        for name, (rows, k) in shapes.items():
            ws = _copies(random_weight_cuda(qtype, rows, k))
            gen = torch.Generator(device="cuda").manual_seed(1)
            x = torch.randn((1, k), dtype=torch.bfloat16, device="cuda", generator=gen)
            ref = x.float() @ dequantize(ws[0], torch.float32).t()
            res = []
            for cfg in configs:
                try:
                    got = fn_for(qtype, cfg)(x, ws[0]).float()
                    err = float((got - ref).abs().max() / ref.abs().max())
                    if not err < 1e-2:
                        raise RuntimeError(f"wrong: rel {err:.3g}")
                    us = time_rotating_us(fn_for(qtype, cfg), ws, x, rep=20)
                    rec = dict(us=round(us, 2), pct=round(100 * ws[0].nbytes / us / 1e3 / ceiling, 1), rel_err=round(err, 5))
                except Exception as e:  # noqa
                    rec = dict(err=str(e)[:200])
                log.write(json.dumps(dict(qtype=qtype, shape=name, rows=rows, k=k, cfg=cfg, **rec)) + "\n"); log.flush()
                res.append((rec.get("us", 1e9), cfg, rec))
            best = min(res, key=lambda r: r[0])
            today = res[0][0]
            picks[f"{qtype},{name}"] = dict(cfg=best[1], us=best[0], today_us=today)
            print(f"{qtype} {name} {rows}x{k}: today {today} us; best {best[1]} {best[0]} us ({best[2].get('pct')}%) | "
                  + " ".join(f"{c}:{r.get('us', 'x')}" for _, c, r in res[1:]), flush=True)
            del ws
            torch.cuda.empty_cache()
    json.dump(picks, open(f"{out_dir}/picks.json", "w"), indent=1)
    t4 = sum(v["today_us"] for k, v in picks.items() if k.startswith("Q4")); b4 = sum(v["us"] for k, v in picks.items() if k.startswith("Q4"))
    t6 = sum(v["today_us"] for k, v in picks.items() if k.startswith("Q6")); b6 = sum(v["us"] for k, v in picks.items() if k.startswith("Q6"))
    print(f"sum Q4_K today {t4:.1f} best {b4:.1f}; Q6_K today {t6:.1f} best {b6:.1f}", flush=True)


if __name__ == "__main__":
    main()

"""One-token int16-x Q4_K configs with fewer rows a program on the small 8B Q4_K_M shapes.
    python3 .devbench/s47/few_rows_sweep.py OUT_DIR
"""
import json, os, sys
import torch
from kvspill.bench.kernels_gguf import _copies, random_weight_cuda, time_rotating_us, copy_ceiling_gbps
from kvspill.kernels import gguf_gemv
from kvspill.kernels.gguf_dequant import dequantize

SHAPES = {"qkv": (6144, 4096), "qk": (5120, 4096), "o": (4096, 4096), "l1b_qkv": (3072, 2048), "l1b_o": (2048, 2048)}
CONFIGS = ["today", (4096, 4, 1), (4096, 4, 2), (2048, 4, 1), (2048, 4, 2), (4096, 2, 1), (2048, 2, 1), (1024, 4, 1), (1024, 2, 1)]
RULE = gguf_gemv.Q4K_INT16X_CONFIGS


def run(cfg, x, w):
    out = torch.empty((1, w.out_features), dtype=x.dtype, device=x.device)
    gguf_gemv.Q4K_INT16X_CONFIGS = RULE if cfg == "today" else ((0, 0, cfg),)
    gguf_gemv._launch_q4k_one_token(x, w, None, out)
    return out


def main():
    out_dir = sys.argv[1]
    ceiling = copy_ceiling_gbps()
    log = open(f"{out_dir}/few_rows_sweep.jsonl", "a")
    for name, (rows, k) in SHAPES.items():
        ws = _copies(random_weight_cuda("Q4_K", rows, k))
        x = torch.randn((1, k), dtype=torch.bfloat16, device="cuda", generator=torch.Generator(device="cuda").manual_seed(1))
        ref = x.float() @ dequantize(ws[0], torch.float32).t()
        parts = []
        for cfg in CONFIGS:
            try:
                err = float((run(cfg, x, ws[0]).float() - ref).abs().max() / ref.abs().max())
                if not err < 1e-2:
                    raise RuntimeError(f"wrong: rel {err:.3g}")
                us = time_rotating_us(lambda x, w: run(cfg, x, w), ws, x, rep=20)
                rec = dict(us=round(us, 2), pct=round(100 * ws[0].nbytes / us / 1e3 / ceiling, 1))
            except Exception as e:  # noqa
                rec = dict(err=str(e)[:200])
            log.write(json.dumps(dict(shape=name, rows=rows, k=k, cfg=cfg, **rec)) + "\n"); log.flush()
            parts.append(f"{cfg}: {rec.get('us', rec.get('err'))}")
        gguf_gemv.Q4K_INT16X_CONFIGS = RULE
        print(f"Q4_K {name} {rows}x{k}: " + " | ".join(parts), flush=True)


if __name__ == "__main__":
    main()

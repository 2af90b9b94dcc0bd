"""The one-token int16-x Q4_K kernel on half-group lanes (KVSPILL_HALF_LANES=1 / 2) against today's (0).
    python3 .devbench/s47/half_sweep.py OUT_DIR
"""
import json, os, sys
import torch
from kvspill.bench.kernels_gguf import _copies, random_weight_cuda, time_rotating_us, copy_ceiling_gbps
from kvspill.kernels.gguf_dequant import dequantize
from kvspill.kernels.quant_linear import quant_linear

SHAPES = {"qkv": (6144, 4096), "qk": (5120, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)}


def main():
    out_dir = sys.argv[1]
    ceiling = copy_ceiling_gbps()
    log = open(f"{out_dir}/half_sweep.jsonl", "a")
    sums = {}
    for name, (rows, k) in SHAPES.items():
        ws = _copies(random_weight_cuda("Q4_K", rows, k))
        x = torch.randn((1, k), dtype=torch.bfloat16, device="cuda", generator=torch.Generator(device="cuda").manual_seed(1))
        ref = x.float() @ dequantize(ws[0], torch.float32).t()
        parts = []
        for half in ("0", "1", "2"):
            os.environ["KVSPILL_HALF_LANES"] = half
            try:
                err = float((quant_linear(x, ws[0]).float() - ref).abs().max() / ref.abs().max())
                if not err < 1e-2:
                    raise RuntimeError(f"wrong: rel {err:.3g}")
                us = time_rotating_us(lambda x, w: quant_linear(x, w), ws, x, rep=20)
                rec = dict(us=round(us, 2), pct=round(100 * ws[0].nbytes / us / 1e3 / ceiling, 1), rel_err=round(err, 5))
            except Exception as e:  # noqa
                rec = dict(err=str(e)[:200])
            log.write(json.dumps(dict(shape=name, rows=rows, k=k, half=half, **rec)) + "\n"); log.flush()
            sums[half] = sums.get(half, 0.0) + rec.get("us", 1e9)
            parts.append(f"{half}: {rec.get('us', rec.get('err'))} ({rec.get('pct')}%)")
        print(f"Q4_K {name} {rows}x{k}: " + " | ".join(parts), flush=True)
        del ws
        torch.cuda.empty_cache()
    os.environ["KVSPILL_HALF_LANES"] = "0"
    print("sum us:", {h: round(v, 1) for h, v in sums.items()}, flush=True)
    best = min(sums, key=sums.get)
    open(f"{out_dir}/best_half.txt", "w").write(best if best != "0" else "1")


if __name__ == "__main__":
    main()

"""One-token int16-x Q4_K / Q6_K kernels asking L2 for all of a program's rows before the PDL wait
(KVSPILL_FULL_PREFETCH=CAP lines; 0 = today's first 4 KB), and Q6_K's v with one row a program.
    python3 .devbench/s47/pf_full_sweep.py OUT_DIR
"""
import json, os, sys
import torch
from kvspill.bench.kernels_gguf import _copies, random_weight_cuda, time_rotating_us, copy_ceiling_gbps
from kvspill.kernels import gguf_gemv
from kvspill.kernels.gguf_dequant import dequantize
from kvspill.kernels.quant_linear import quant_linear

SHAPES = [("Q4_K", "qkv", 6144, 4096), ("Q4_K", "qk", 5120, 4096), ("Q4_K", "o", 4096, 4096), ("Q4_K", "gate_up", 28672, 4096),
          ("Q4_K", "down", 4096, 14336), ("Q6_K", "v", 1024, 4096), ("Q6_K", "down", 4096, 14336), ("Q6_K", "lm_head", 128256, 4096)]
CAPS = ["0", "64", "128", "256", "1024"]


def main():
    out_dir = sys.argv[1]
    ceiling = copy_ceiling_gbps()
    print(f"ceiling {ceiling:.0f} GB/s", flush=True)
    log = open(f"{out_dir}/pf_full_sweep.jsonl", "a")
    sums = {}
    q6 = gguf_gemv.Q6K_INT16X_CONFIG
    for qtype, name, rows, k in SHAPES:
        ws = _copies(random_weight_cuda(qtype, rows, k))
        x = torch.randn((1, k), dtype=torch.bfloat16, device="cuda", generator=torch.Generator(device="cuda").manual_seed(1))
        ref = x.float() @ dequantize(ws[0], torch.float32).t()
        parts = []
        cases = [(c, None) for c in CAPS] + ([(c, (1024, 1, 1)) for c in ("0", "64")] if name == "v" else [])
        for cap, cfg in cases:
            os.environ["KVSPILL_FULL_PREFETCH"] = cap
            gguf_gemv.Q6K_INT16X_CONFIG = cfg or q6
            try:
                got = quant_linear(x, ws[0]).float()
                err = float((got - ref).abs().max() / ref.abs().max())
                if not err < 1e-2:
                    raise RuntimeError(f"wrong: rel {err:.3g}")
                us = time_rotating_us(lambda x, w: quant_linear(x, w), ws, x, rep=20)
                rec = dict(us=round(us, 2), pct=round(100 * ws[0].nbytes / us / 1e3 / ceiling, 1), rel_err=round(err, 5))
            except Exception as e:  # noqa
                rec = dict(err=str(e)[:200])
            log.write(json.dumps(dict(qtype=qtype, shape=name, rows=rows, k=k, cap=cap, cfg=cfg, **rec)) + "\n"); log.flush()
            if cfg is None:
                sums[cap] = sums.get(cap, 0.0) + rec.get("us", 1e9)
            parts.append(f"{cap}{'' if cfg is None else cfg}: {rec.get('us', rec.get('err'))} ({rec.get('pct')}%)")
        gguf_gemv.Q6K_INT16X_CONFIG = q6
        print(f"{qtype} {name} {rows}x{k}: " + " | ".join(parts), flush=True)
        del ws
        torch.cuda.empty_cache()
    print("sum us by cap:", {c: round(v, 1) for c, v in sums.items()}, flush=True)
    open(f"{out_dir}/best_cap.txt", "w").write(min(sums, key=sums.get))


if __name__ == "__main__":
    main()

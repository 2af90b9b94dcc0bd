"""q6k_int16x_kernel configs against the float Q6_K lanes (FMA_CONFIG) on the 8B shapes, one bf16 token.
    python3 .devbench/s37/q6_sweep.py OUT_DIR
"""
import json, os, sys
import torch
from kvspill.bench.mma_sweep import Bench
from kvspill.bench.kernels_gguf import SHAPES
from kvspill.kernels import gguf_gemv

CONFIGS = [(512, 2, 1), (512, 4, 1), (1024, 4, 1), (1024, 8, 1), (2048, 4, 1), (1024, 4, 2), (2048, 8, 2), (512, 8, 1)]


def fn_for(cfg):
    def fn(x, w):
        out = torch.empty((1, w.out_features), dtype=x.dtype, device=x.device)
        gguf_gemv.Q6K_INT16X_CONFIG = cfg
        gguf_gemv._launch_lane_kernel(x, w, None, out, gguf_gemv.FMA_CONFIG["Q6_K"])
        return out
    return fn


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    bench = Bench()
    log = open(f"{out_dir}/q6_int16x.jsonl", "a")
    tot = {}
    for shape in SHAPES:
        x, ref = bench.case("Q6_K", shape, 1)
        w0 = bench.copies("Q6_K", shape)[0]
        parts = []
        for cfg in [None] + CONFIGS:
            try:
                got = fn_for(cfg)(x, w0).float()
                err = float((got - ref).abs().max() / ref.abs().max())
                rec = dict(rel_err=round(err, 5), **bench.time_us(fn_for(cfg), "Q6_K", shape, 1))
            except Exception as e:  # noqa
                rec = dict(err=str(e)[:300])
            log.write(json.dumps(dict(shape=shape, cfg=cfg, **rec)) + "\n"); log.flush()
            tot[cfg] = tot.get(cfg, 0.0) + rec.get("us", 1e9)
            parts.append(f"{'float' if cfg is None else cfg}: {rec.get('us')} us {rec.get('pct')}% err {rec.get('rel_err', rec.get('err'))}")
        print(shape, " | ".join(parts), flush=True)
    print("sum us:", {str(k): round(v, 2) for k, v in tot.items()}, flush=True)
    gguf_gemv.Q6K_INT16X_CONFIG = None


if __name__ == "__main__":
    main()

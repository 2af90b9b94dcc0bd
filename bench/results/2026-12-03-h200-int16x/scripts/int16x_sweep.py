"""q4k_int16x_kernel configs against q4k_one_token_kernel (today) on the 8B shapes, one bf16 token.
    python3 .devbench/s36/int16x_sweep.py OUT_DIR
"""
import json, os, sys, time
import torch
from kvspill.bench.mma_sweep import Bench
from kvspill.bench.kernels_gguf import SHAPES
from kvspill.kernels import gguf_gemv

CONFIGS = ["rule", (2048, 16, 1), (1024, 16, 1), (4096, 16, 2), (2048, 8, 1), (4096, 8, 2), (2048, 8, 2), (4096, 16, 4), (8192, 16, 4), (8192, 16, 2), (1024, 8, 1)]
RULE = gguf_gemv.Q4K_INT16X_CONFIGS


def fn_for(cfg):
    def fn(x, w):
        out = torch.empty((1, w.out_features), dtype=x.dtype, device=x.device)
        if cfg is None:
            os.environ["KVSPILL_INT16_X"] = "0"
        else:
            os.environ["KVSPILL_INT16_X"] = "1"
            gguf_gemv.Q4K_INT16X_CONFIGS = ((0, 0, cfg),) if cfg != "rule" else RULE
        gguf_gemv._launch_q4k_one_token(x, w, None, out)
        return out
    return fn


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    bench = Bench()
    print(f"ceiling {bench.ceiling:.0f} GB/s", flush=True)
    log = open(f"{out_dir}/int16x.jsonl", "a")
    tot = {}
    for shape in SHAPES:
        x, ref = bench.case("Q4_K", shape, 1)
        w0 = bench.copies("Q4_K", shape)[0]
        parts = []
        for cfg in [None] + CONFIGS:
            try:
                got = fn_for(cfg)(x, w0).float()
                err = float((got - ref).abs().max() / ref.abs().max())
                rec = dict(rel_err=round(err, 5), **bench.time_us(fn_for(cfg), "Q4_K", shape, 1))
            except Exception as e:  # noqa
                rec = dict(err=str(e)[:300])
            log.write(json.dumps(dict(shape=shape, cfg=cfg, **rec)) + "\n"); log.flush()
            tot.setdefault(cfg, 0.0)
            tot[cfg] += rec.get("us", 1e9)
            parts.append(f"{'today' if cfg is None else cfg}: {rec.get('us')} us {rec.get('pct')}% err {rec.get('rel_err', rec.get('err'))}")
        print(shape, " | ".join(parts), flush=True)
    print("sum us:", {str(k): round(v, 2) for k, v in tot.items()}, flush=True)


if __name__ == "__main__":
    main()

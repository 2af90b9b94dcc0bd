"""One-token Q4_K int16-x GEMV: x rounded in every program (today) against x rounded once per call
(round_int16_x + q4k_int16x_pre_kernel), per 8B shape and config, one bf16 token.
    python3 .devbench/s44/pre_sweep.py OUT_DIR
"""
import json, os, sys
import torch
from kvspill.bench.mma_sweep import Bench
from kvspill.kernels import gguf_gemv
from kvspill.kernels.gguf_gemv_int16x import round_int16_x

CONFIGS = ["rule", (2048, 8, 2), (4096, 8, 2), (2048, 16, 2), (4096, 16, 2), (4096, 16, 4), (2048, 16, 4),
           (1024, 16, 1), (2048, 32, 4), (8192, 16, 4), (8192, 8, 2), (1024, 8, 1), (2048, 4, 1)]
RULE = gguf_gemv.Q4K_INT16X_CONFIGS


def fn_for(cfg, once):
    def fn(x, w):
        out = torch.empty((1, w.out_features), dtype=x.dtype, device=x.device)
        os.environ["KVSPILL_INT16_X"] = "1"
        os.environ["KVSPILL_INT16_X_ONCE"] = "1" if once else "0"
        gguf_gemv.Q4K_INT16X_CONFIGS = ((0, 0, cfg),) if cfg != "rule" else RULE
        gguf_gemv._launch_q4k_one_token(x, w, None, out)
        return out
    return fn


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    bench = Bench()
    print(f"ceiling {bench.ceiling:.0f} GB/s", flush=True)
    log = open(f"{out_dir}/pre.jsonl", "a")
    tot = {}
    for shape in ("qkv", "o", "gate_up", "down"):
        x, ref = bench.case("Q4_K", shape, 1)
        w0 = bench.copies("Q4_K", shape)[0]
        parts = []
        rq = bench.time_us(lambda x, w: round_int16_x(x), "Q4_K", shape, 1)
        parts.append(f"round alone {rq['us']} us")
        for once in (False, True):
            for cfg in CONFIGS if once else ["rule"]:
                key = f"{'once' if once else 'today'} {cfg}"
                try:
                    got = fn_for(cfg, once)(x, w0).float()
                    err = float((got - ref).abs().max() / ref.abs().max())
                    rec = dict(rel_err=round(err, 5), **bench.time_us(fn_for(cfg, once), "Q4_K", shape, 1))
                except Exception as e:  # noqa
                    rec = dict(err=str(e)[:300])
                log.write(json.dumps(dict(shape=shape, cfg=str(cfg), once=once, **rec)) + "\n"); log.flush()
                tot[key] = tot.get(key, 0.0) + rec.get("us", 1e9)
                parts.append(f"{key}: {rec.get('us')} us {rec.get('pct')}% err {rec.get('rel_err', rec.get('err'))}")
        print(shape, "\n  " + "\n  ".join(parts), flush=True)
    print("sum us:", json.dumps({k: round(v, 2) for k, v in sorted(tot.items(), key=lambda kv: kv[1])}, indent=0), flush=True)


if __name__ == "__main__":
    main()

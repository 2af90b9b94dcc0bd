"""Re-sweep Q4K_INT16X_CONFIGS for the half-group lanes (618e492): every (CHUNK, BLOCK_N, warps) on
the 8B Q4_K_M shapes + a Q4_K lm_head + 1B shapes; per-shape best into picks.json (prof_picks.py).
    python3 .devbench/s48/resweep.py OUT_DIR
"""
import itertools, json, os, sys
import torch
from kvspill.bench.kernels_gguf import _copies, random_weight_cuda, time_rotating_us, copy_ceiling_gbps
from kvspill.kernels import gguf_gemv
from kvspill.kernels.gguf_dequant import dequantize

SHAPES = {"gate_up": (28672, 4096), "down": (4096, 14336), "qkv": (6144, 4096), "o": (4096, 4096), "qk": (5120, 4096),
          "lm_head": (128256, 4096), "l1b_qkv": (3072, 2048), "l1b_gate_up": (16384, 2048)}
# 16-byte lanes a thread holds: BLOCK_N * 8 * SB / (32 * warps); keep 2..16 (256 B of registers at most)
CONFIGS = ["today"] + [c for c in itertools.product((512, 1024, 2048, 4096, 8192), (4, 8, 16), (1, 2, 4))
                       if 2 <= c[1] * c[0] // 1024 // c[2] <= 16]
DEADLINE = float(os.environ.get("SWEEP_S", "290"))
RULE = gguf_gemv.Q4K_INT16X_CONFIGS


def run(cfg, x, w):
    out = torch.empty((1, w.out_features), dtype=x.dtype, device=x.device)
    gguf_gemv.Q4K_INT16X_CONFIGS = RULE if cfg == "today" else ((0, 0, cfg),)
    gguf_gemv._launch_q4k_one_token(x, w, None, out)
    return out


def main():
    out_dir = sys.argv[1]
    ceiling = copy_ceiling_gbps()
    log = open(f"{out_dir}/resweep.jsonl", "a")
    picks = {}
    import time; t0 = time.time()
    for name, (rows, k) in SHAPES.items():
        ws = _copies(random_weight_cuda("Q4_K", rows, k))
        x = torch.randn((1, k), dtype=torch.bfloat16, device="cuda")
        ref = x.float() @ dequantize(ws[0], torch.float32).t()
        res = []
        for cfg in CONFIGS:
            if cfg != "today" and (cfg[0] > k or time.time() - t0 > DEADLINE):
                continue
            try:
                err = float((run(cfg, x, ws[0]).float() - ref).abs().max() / ref.abs().max())
                if not err < 1e-2:
                    raise RuntimeError(f"wrong: {err:.3g}")
                us = time_rotating_us(lambda x, w: run(cfg, x, w), ws, x, rep=10)
                rec = dict(us=round(us, 2), pct=round(100 * ws[0].nbytes / us / 1e3 / ceiling, 1))
            except Exception as e:  # noqa
                rec = dict(err=str(e)[:160])
            log.write(json.dumps(dict(shape=name, rows=rows, k=k, cfg=cfg, **rec)) + "\n"); log.flush()
            res.append((rec.get("us", 1e9), cfg))
        best = min(res, key=lambda r: r[0])
        picks[name] = dict(cfg=best[1], us=best[0], today_us=res[0][0])
        print(f"{name} {rows}x{k}: today {res[0][0]} best {best[1]} {best[0]}", flush=True)
        del ws
        torch.cuda.empty_cache()
    gguf_gemv.Q4K_INT16X_CONFIGS = RULE
    json.dump(picks, open(f"{out_dir}/picks.json", "w"), indent=1)


if __name__ == "__main__":
    main()

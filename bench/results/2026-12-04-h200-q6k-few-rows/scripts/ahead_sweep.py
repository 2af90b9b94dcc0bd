"""One-token int16-x Q4_K / Q6_K kernels (today's configs) with each program asking L2 for the rows
of program pid + P (KVSPILL_GEMV_AHEAD=P), on the shapes of a Llama-3.1-8B Q4_K_M file.
    python3 .devbench/s47/ahead_sweep.py OUT_DIR
"""
import json, os, sys
import torch
from kvspill.bench.kernels_gguf import _copies, random_weight_cuda, time_rotating_us, copy_ceiling_gbps
from kvspill.kernels import gguf_gemv
from kvspill.kernels.gguf_dequant import dequantize

SHAPES = [("Q4_K", "qkv", 6144, 4096), ("Q4_K", "qk", 5120, 4096), ("Q4_K", "o", 4096, 4096), ("Q4_K", "gate_up", 28672, 4096),
          ("Q4_K", "down", 4096, 14336), ("Q6_K", "v", 1024, 4096), ("Q6_K", "down", 4096, 14336), ("Q6_K", "lm_head", 128256, 4096)]
AHEAD = [0, 132, 264, 528, 1056, 2112]
V_CFGS = [(512, 1, 1), (1024, 1, 1)]


def launch(qtype, x, w):
    out = torch.empty((1, w.out_features), dtype=x.dtype, device=x.device)
    (gguf_gemv._launch_q4k_one_token if qtype == "Q4_K" else gguf_gemv._launch_q6k_int16x)(x, w, None, out)
    return out


def main():
    out_dir = sys.argv[1]
    ceiling = copy_ceiling_gbps()
    print(f"ceiling {ceiling:.0f} GB/s", flush=True)
    log = open(f"{out_dir}/ahead_sweep.jsonl", "a")
    sums = {a: 0.0 for a in AHEAD}
    q6_default = gguf_gemv.Q6K_INT16X_CONFIG
    for qtype, name, rows, k in SHAPES:
        ws = _copies(random_weight_cuda(qtype, rows, k))
        x = torch.randn((1, k), dtype=torch.bfloat16, device="cuda", generator=torch.Generator(device="cuda").manual_seed(1))
        ref = x.float() @ dequantize(ws[0], torch.float32).t()
        cases = [(a, None) for a in AHEAD] + ([(a, c) for c in V_CFGS for a in (0, 528)] if name == "v" else [])
        parts = []
        for ahead, cfg in cases:
            os.environ["KVSPILL_GEMV_AHEAD"] = str(ahead)
            gguf_gemv.Q6K_INT16X_CONFIG = cfg or q6_default
            try:
                got = launch(qtype, x, ws[0]).float()
                err = float((got - ref).abs().max() / ref.abs().max())
                if not err < 1e-2:
                    raise RuntimeError(f"wrong: rel {err:.3g}")
                us = time_rotating_us(lambda x, w: launch(qtype, x, w), ws, x, rep=20)
                rec = dict(us=round(us, 2), pct=round(100 * ws[0].nbytes / us / 1e3 / ceiling, 1), rel_err=round(err, 5))
            except Exception as e:  # noqa
                rec = dict(err=str(e)[:200])
            log.write(json.dumps(dict(qtype=qtype, shape=name, rows=rows, k=k, ahead=ahead, cfg=cfg, **rec)) + "\n"); log.flush()
            if cfg is None:
                sums[ahead] += rec.get("us", 1e9)
            parts.append(f"{ahead}{'' if cfg is None else cfg}: {rec.get('us', rec.get('err'))} ({rec.get('pct')}%)")
        print(f"{qtype} {name} {rows}x{k}: " + " | ".join(parts), flush=True)
        gguf_gemv.Q6K_INT16X_CONFIG = q6_default
        del ws
        torch.cuda.empty_cache()
    os.environ["KVSPILL_GEMV_AHEAD"] = "0"
    print("sum us by ahead:", {a: round(v, 1) for a, v in sums.items()}, flush=True)
    best = min(sums, key=sums.get)
    open(f"{out_dir}/best_ahead.txt", "w").write(str(best))


if __name__ == "__main__":
    main()

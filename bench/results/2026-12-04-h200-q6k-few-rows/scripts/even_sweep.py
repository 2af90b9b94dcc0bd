"""Masked (KVSPILL_EVEN_K=0) against unmasked (=1) loads where the tiles are whole: one-token int16-x
Q4_K / Q6_K and the tensor-core kernel at 8 and 32 tokens, shapes of a Llama-3.1-8B Q4_K_M file.
    python3 .devbench/s47/even_sweep.py OUT_DIR
"""
import json, os, sys
import torch
from kvspill.bench.kernels_gguf import _copies, random_weight_cuda, time_rotating_us, copy_ceiling_gbps
from kvspill.kernels import gguf_gemv
from kvspill.kernels.gguf_dequant import dequantize
from kvspill.kernels.quant_linear import quant_linear

SHAPES = [("Q4_K", "qkv", 6144, 4096), ("Q4_K", "qk", 5120, 4096), ("Q4_K", "o", 4096, 4096), ("Q4_K", "gate_up", 28672, 4096),
          ("Q4_K", "down", 4096, 14336), ("Q6_K", "v", 1024, 4096), ("Q6_K", "down", 4096, 14336), ("Q6_K", "lm_head", 128256, 4096)]


def main():
    out_dir = sys.argv[1]
    ceiling = copy_ceiling_gbps()
    print(f"ceiling {ceiling:.0f} GB/s", flush=True)
    log = open(f"{out_dir}/even_sweep.jsonl", "a")
    sums = {}
    for qtype, name, rows, k in SHAPES:
        ws = _copies(random_weight_cuda(qtype, rows, k))
        w_ref = dequantize(ws[0], torch.float32)
        parts = []
        for tokens in (1, 8, 32):
            x = torch.randn((tokens, k), dtype=torch.bfloat16, device="cuda", generator=torch.Generator(device="cuda").manual_seed(tokens))
            ref = x.float() @ w_ref.t()
            for even in ("0", "1"):
                os.environ["KVSPILL_EVEN_K"] = even
                try:
                    got = quant_linear(x, ws[0]).float()
                    err = float((got - ref).abs().max() / ref.abs().max())
                    if not err < 1e-2:
                        raise RuntimeError(f"wrong: rel {err:.3g}")
                    us = time_rotating_us(lambda x, w: quant_linear(x, w), ws, x, rep=20)
                    rec = dict(us=round(us, 2), pct=round(100 * ws[0].nbytes / us / 1e3 / ceiling, 1), rel_err=round(err, 5))
                except Exception as e:  # noqa
                    rec = dict(err=str(e)[:200])
                log.write(json.dumps(dict(qtype=qtype, shape=name, rows=rows, k=k, tokens=tokens, even=even, **rec)) + "\n"); log.flush()
                sums[(tokens, even)] = sums.get((tokens, even), 0.0) + rec.get("us", 1e9)
                parts.append(f"t{tokens} e{even}: {rec.get('us', rec.get('err'))}")
        print(f"{qtype} {name} {rows}x{k}: " + " | ".join(parts), flush=True)
        del ws, w_ref
        torch.cuda.empty_cache()
    os.environ["KVSPILL_EVEN_K"] = "1"
    print("sum us (tokens, even):", {f"{t},{e}": round(v, 1) for (t, e), v in sums.items()}, flush=True)


if __name__ == "__main__":
    main()

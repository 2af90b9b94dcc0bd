"""What the sweeps of this folder share: weights with scale pairs (their rotating copies:
kernels_gguf._copies), today's kernels timed, a set of CUDA configs checked and timed."""

from dataclasses import replace

import torch

from kvspill.bench.kernels_gguf import _copies as copies  # noqa: F401 - the sweeps' name for it
from kvspill.kernels.gguf_mma_words import pack_scales


def with_pairs(w):
    return replace(w, scale_pairs=pack_scales(w, torch.bfloat16))


def today_us(x, ws):
    """What the engine runs today on x's token count, timed: the int16-x GEMV at one token, the
    Triton words form with its table config at more."""
    from kvspill.bench.kernels_gguf import time_rotating_us
    from kvspill.kernels.gguf_mma import quant_matmul_mma
    from kvspill.kernels.gguf_mma_configs import mma_config
    from kvspill.kernels.quant_linear import quant_linear

    if x.shape[0] == 1:
        return time_rotating_us(lambda x, w: quant_linear(x, w), ws, x, rep=20)
    cfg = mma_config(ws[0], x.shape[0])
    return time_rotating_us(lambda x, w, c=cfg: quant_matmul_mma(x, w, config=c), ws, x, rep=20)


def time_configs(row, x, ref, weights_for, configs, name_of, splits=(1, 2, 4, 8)):
    """Each config at each split K on the weights `weights_for(config)` (rotating copies): checked
    against `ref` (wrong ones are recorded, not timed as results), timed into `row` under
    `name_of(config)`. Returns (us, name) of the fastest right one."""
    import q4k_mma_cuda as qc
    from kvspill.bench.kernels_gguf import time_rotating_us

    scale, best = float(ref.abs().max()), (1e9, "")
    for c0 in configs:
        ws = weights_for(c0)
        for split in splits:
            c = replace(c0, split_k=split)
            try:
                err = float((qc.q4k_matmul_cuda(x, ws[0], config=c).float() - ref).abs().max()) / scale
                us = time_rotating_us(lambda x, w, c=c: qc.q4k_matmul_cuda(x, w, config=c), ws, x, rep=20)
                row[name_of(c)] = round(us, 2) if err < 2e-2 else f"wrong {err:.3g}"
                if err < 2e-2:
                    best = min(best, (us, name_of(c)))
            except Exception as e:  # noqa: BLE001 - a config that fails to build or run is a result
                row[name_of(c)] = f"error: {str(e)[:200]}"
    return best

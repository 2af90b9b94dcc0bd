"""Weights with scale pairs and their rotating copies (the sweeps of this folder)."""

from dataclasses import replace

import torch

from kvspill.bench.kernels_gguf import ROTATE_BYTES
from kvspill.kernels.gguf_mma_words import pack_scales


def with_pairs(w):
    return replace(w, scale_pairs=pack_scales(w, torch.bfloat16))


def copies(w):
    n = max(1, -(-ROTATE_BYTES // w.nbytes))
    return [w] + [replace(w, data=w.data.clone(), scale_pairs=w.scale_pairs.clone()) for _ in range(n - 1)]

"""Weights with scale pairs (the sweeps of this folder; their rotating copies: kernels_gguf._copies)."""

from dataclasses import replace

import torch

from kvspill.bench.kernels_gguf import _copies as copies  # noqa: F401 - the sweeps' name for it
from kvspill.kernels.gguf_mma_words import pack_scales


def with_pairs(w):
    return replace(w, scale_pairs=pack_scales(w, torch.bfloat16))

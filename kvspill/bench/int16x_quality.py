"""Quality of int16 x in the one-token Q4_K and Q6_K GEMVs (kernels/gguf_gemv_int16x.py;
`KVSPILL_INT16_X=0` turns them off) on real weights: `python -m kvspill.bench.int16x_quality`
(Q4_K's rounding per 16 values; `--group 4`: Q6_K's per 4).

The embedded SmolLM2-135M-Instruct at fp32 compute reads Python's standard-library sources
(kv_quality's text; `--tokens` of them, teacher-forced: one causal pass) twice: with every
quantized linear exact (x @ dequantize(W).T), and with x rounded as the int16-x kernels round it
(`int16_x_blocks`: per 16 values, or `--group`, to multiples of a power of two <= 2**-13 of their
amax; each block's constant term, the Q4_K min or the Q4_1 m, on the exact sum of x, as the
kernels keep it). The embedded file's linears are Q4_1, whose one-token kernel rounds x per 16 as
Q4_K's and Q5_K's do (Q6_K's -32 * scale is a constant term on exact sums too), so this measures
the rounding on a real model's activations with the kernels' arithmetic, not the kernels
themselves (tests/kernels/test_gguf_int16x.py ties the kernels to `q4k_int16x_ref` and
`q6k_int16x_ref` on the GPU and in the interpreter). Every token of the pass takes the rounding, as each decoded token would.
Reported: top-1 agreement of the next-token argmax, mean and max KL(exact || int16 x), and both
perplexities of the text. The reference point is x itself: `--bits 8` rounds to 8-bit integers
instead (llama.cpp's Q8_1 activations' width, with a power-of-two scale), and the model's own
bf16 compute is another yardstick (docs/eval.md has the figures).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sysconfig
from pathlib import Path

import torch
import torch.nn.functional as F

from kvspill.bench.kv_quality import STDLIB_FILES, StoredKVAttention, compare, stdlib_text, teacher_forced
from kvspill.kernels.gguf_formats import QuantizedWeight, block_offsets, dequantize_ref
from kvspill.kernels.gguf_gemv_int16x import Q4K_X_GROUP, X_BITS, int16_x_blocks
from kvspill.kernels.quant_linear import QuantLinearPath
from kvspill.model import quant
from kvspill.model.loader import load_model
from kvspill.model.resolve import resolve_model
from kvspill.text.tokenizer import load_tokenizer


def int16x_linear(
    x: torch.Tensor,
    weight: QuantizedWeight,
    bias: torch.Tensor | None = None,
    scratch: torch.Tensor | None = None,
    path: QuantLinearPath | None = None,
    bits: int = X_BITS,
    group: int = Q4K_X_GROUP,
) -> torch.Tensor:
    """x @ W.T with x rounded per `group` values as the int16-x kernels do (Q4_K 16, Q6_K 4) and
    each 32-weight block's constant term on the exact sum of x: sum_b (W_b - c_b) . (dx_b * xq_b)
    + c_b * sum(x_b)."""
    w = dequantize_ref(weight.data, weight.qtype, weight.in_features, torch.float32)
    offsets = block_offsets(weight.data, weight.qtype, weight.in_features)  # [rows, K / 32]
    scaled = w - offsets.repeat_interleave(32, dim=1)
    xq, dx = int16_x_blocks(x, bits, group)  # [..., K / group, group], [..., K / group]
    x_rounded = (xq * dx[..., None]).flatten(-2)
    x_sums = x.float().reshape(*x.shape[:-1], -1, 32).sum(dim=-1)
    out = x_rounded @ scaled.t() + x_sums @ offsets.t()
    return (out if bias is None else out + bias.float()).to(x.dtype)


def perplexity(logits: torch.Tensor, ids: list[int]) -> float:
    """exp of the mean negative log-likelihood of ids[1:] under logits[:-1]."""
    nll = F.cross_entropy(logits[:-1].float(), torch.tensor(ids[1:]))
    return math.exp(float(nll))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument(
        "--bits", type=int, default=X_BITS, help="the integers' width: the kernel's 14, or a what-if"
    )
    ap.add_argument(
        "--group",
        type=int,
        default=Q4K_X_GROUP,
        choices=(4, 8, 16, 32),
        help="values per rounding scale: the Q4_K kernel's 16, or the Q6_K kernel's 4",
    )
    ap.add_argument("--out", help="write the figures here as JSON")
    args = ap.parse_args(argv)
    resolved = resolve_model(None)
    loaded = load_model(resolved, torch.device("cpu"), torch.float32, keep_quantized=True)
    ids = load_tokenizer(resolved).encode(stdlib_text())[: args.tokens]
    attention = StoredKVAttention(None, set())
    exact_linear = quant.quant_linear
    ref = teacher_forced(loaded.model, ids, attention)
    quant.quant_linear = functools.partial(int16x_linear, bits=args.bits, group=args.group)
    try:
        rounded = teacher_forced(loaded.model, ids, attention)
    finally:
        quant.quant_linear = exact_linear
    result = {
        "model": resolved.display_name,
        "num_tokens": len(ids),
        "bits": args.bits,
        "group": args.group,
        "text": f"Python {sysconfig.get_python_version()} stdlib: {', '.join(STDLIB_FILES)}",
        **compare(ref, rounded),
        "perplexity_exact": perplexity(ref, ids),
        "perplexity_int16x": perplexity(rounded, ids),
    }
    print(json.dumps(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""Quality of a quantized KV cache on real weights: `python -m kvspill.bench.kv_quality`.

The embedded SmolLM2-135M-Instruct at fp32 compute reads Python's own standard-library sources
(text no one here wrote; `--tokens` of them, teacher-forced: one causal pass), twice: with K and
V kept in fp32, and with K and V stored in `--kv-cache-dtype` through the engine's own store
conversion (`kernels/kv_quant.quantize_kv`, what `store_kv_ref` writes and the Triton store
kernels match: fp8 values, or int8 rows of the Hadamard-basis K/V with their per-token-per-head
scale) and read back as the attention kernels do (`kv_quant.stored_values`: widened, int8 times
its scale; `stored_and_read`). Reported: top-1 agreement
of the next-token argmax, mean and max KL(fp32 KV || quantized KV) per position.
`--kv-cache-dtype-skip-layers` (the engine's flag; `--skip-layers` before 2026-12-01) keeps the
listed layers unquantized, here and in the engine's greedy run; `--per-layer N` also measures, on the first N tokens, the KL of
quantizing one layer at a time, and `--search-skip` then finds the fewest layers, worst first,
that the gate needs kept (`search_skip_list`).

Then greedy tokens of a chat prompt through the engine (`LLM`, dtype float32) with the
unquantized and the quantized KV cache, side by side: the real store and attention paths.

The gate of issue 12: top-1 >= 0.99 and mean KL <= 0.01 over >= 2,000 tokens.
"""

from __future__ import annotations

import argparse
import json
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from kvspill.bench.engine_flags import add_engine_flags
from kvspill.kernels.kv_quant import hadamard, kv_storage_dtype, rotate, stored_values
from kvspill.model.loader import load_model
from kvspill.model.resolve import resolve_model
from kvspill.text.tokenizer import load_tokenizer

STDLIB_FILES = ("argparse.py", "textwrap.py", "heapq.py", "bisect.py")  # read in this order
TOP1_GATE, KL_GATE = 0.99, 0.01


def stored_and_read(x: torch.Tensor, kv_dtype: torch.dtype) -> torch.Tensor:
    """x [num_tokens, num_kv_heads, head_dim] as the engine stores it in a `kv_dtype` pool and
    its attention reads it back: int8 rows are the Hadamard-basis values with one scale each
    (the backend turns q the same way; turning K back instead gives the same q.k)."""
    if kv_dtype != torch.int8:
        return stored_values(x, kv_dtype)
    basis = hadamard(x.shape[-1])
    return rotate(stored_values(rotate(x, basis), kv_dtype), basis)


class StoredKVAttention:
    """Causal GQA attention over K/V stored as `kv_dtype` and read back (None: untouched)."""

    def __init__(self, kv_dtype: torch.dtype | None, quantized_layers: set[int]) -> None:
        self.kv_dtype = kv_dtype
        self.quantized_layers = quantized_layers

    def __call__(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.kv_dtype is not None and layer_idx in self.quantized_layers:
            k, v = stored_and_read(k, self.kv_dtype), stored_and_read(v, self.kv_dtype)
        o = F.scaled_dot_product_attention(
            q.transpose(0, 1)[None],
            k.transpose(0, 1)[None],
            v.transpose(0, 1)[None],
            is_causal=True,
            enable_gqa=True,
        )  # [1, num_heads, num_tokens, head_dim]
        return o[0].transpose(0, 1)


def stdlib_text() -> str:
    lib = Path(sysconfig.get_paths()["stdlib"])
    return "\n".join((lib / name).read_text() for name in STDLIB_FILES)


def compare(ref_logits: torch.Tensor, logits: torch.Tensor) -> dict[str, float]:
    lp_ref, lp = F.log_softmax(ref_logits, -1), F.log_softmax(logits, -1)
    kl = (lp_ref.exp() * (lp_ref - lp)).sum(-1)  # [num_tokens]
    return {
        "top1_agreement": float((ref_logits.argmax(-1) == logits.argmax(-1)).float().mean()),
        "mean_kl": float(kl.mean()),
        "max_kl": float(kl.max()),
    }


def teacher_forced(model: Any, ids: list[int], attention: StoredKVAttention) -> torch.Tensor:
    with torch.inference_mode():
        hidden = model(torch.tensor(ids), torch.arange(len(ids)), attention)
        return model.compute_logits(hidden).float()


def greedy_tokens(
    kv_cache_dtype: str, prompt: str, max_tokens: int, skip_layers: tuple[int, ...] = ()
) -> tuple[list[int], str]:
    from kvspill.llm import LLM
    from kvspill.sampling_params import SamplingParams

    skip = skip_layers if kv_cache_dtype != "auto" else ()
    llm = LLM(dtype="float32", kv_cache_dtype=kv_cache_dtype, kv_cache_dtype_skip_layers=skip)
    out = llm.chat(
        [{"role": "user", "content": prompt}], SamplingParams(temperature=0.0, max_tokens=max_tokens)
    )
    return list(out[0].token_ids), out[0].text


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_engine_flags(ap, kv_cache_dtype="fp8", kv_cache_dtype_skip_layers="")
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--per-layer", type=int, default=0, help="tokens for the one-layer-at-a-time KL (0: off)")
    ap.add_argument(
        "--search-skip",
        action="store_true",
        help="find the fewest layers, worst first by --per-layer's KL, to keep unquantized for the gate",
    )
    ap.add_argument("--greedy-tokens", type=int, default=48)
    ap.add_argument("--prompt", default="Write a Python function that checks whether a number is prime.")
    ap.add_argument("--out", help="write the figures here as JSON")
    args = ap.parse_args(argv)
    if args.search_skip and not args.per_layer:
        ap.error("--search-skip ranks the layers by --per-layer N's KL: give --per-layer (e.g. 1024)")
    return args


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    resolved = resolve_model(None)
    loaded = load_model(resolved, torch.device("cpu"), torch.float32)
    ids = load_tokenizer(resolved).encode(stdlib_text())[: args.tokens]
    kv_dtype = kv_storage_dtype(args.kv_cache_dtype, torch.float32)
    skip = set(args.kv_cache_dtype_skip_layers)
    layers = set(range(loaded.num_layers))

    def measure(ids: list[int], quantized: set[int]) -> torch.Tensor:
        return teacher_forced(loaded.model, ids, StoredKVAttention(kv_dtype, quantized))

    ref = teacher_forced(loaded.model, ids, StoredKVAttention(None, layers))
    result: dict[str, Any] = {
        "kv_cache_dtype": args.kv_cache_dtype,
        "num_tokens": len(ids),
        "text": f"Python {sysconfig.get_python_version()} stdlib: {', '.join(STDLIB_FILES)}",
        "skip_layers": sorted(skip),
        **compare(ref, measure(ids, layers - skip)),
    }
    result["passes_gate"] = result["top1_agreement"] >= TOP1_GATE and result["mean_kl"] <= KL_GATE
    print(json.dumps(result))
    if args.per_layer:
        head = ids[: args.per_layer]
        result["per_layer_mean_kl"] = {
            layer: compare(ref[: len(head)], measure(head, {layer}))["mean_kl"] for layer in sorted(layers)
        }
        print(json.dumps({"per_layer_mean_kl": result["per_layer_mean_kl"]}))
    if args.search_skip:
        result["skip_search"] = search_skip_list(
            result["per_layer_mean_kl"], lambda kept: compare(ref, measure(ids, layers - kept))
        )
        print(json.dumps({"skip_search": result["skip_search"]}))
        skip = set(result["skip_search"]["skip_layers"] or ())
    if args.greedy_tokens:
        for name in ("auto", args.kv_cache_dtype):
            kept = sorted(skip) if name != "auto" else []
            tokens, text = greedy_tokens(name, args.prompt, args.greedy_tokens, tuple(kept))
            result[f"greedy_{name}"] = {"token_ids": tokens, "text": text, "skip_layers": kept}
            flag = f" --kv-cache-dtype-skip-layers {','.join(map(str, kept))}" if kept else ""
            print(f"--- greedy, --kv-cache-dtype {name}{flag} (dtype float32):\n{tokens}\n{text!r}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


def search_skip_list(
    per_layer_kl: dict[int, float], measure: Callable[[set[int]], dict[str, float]]
) -> dict[str, Any]:
    """The fewest layers, taken worst first by their one-layer KL, whose keeping unquantized passes
    the gate: a bisection over the count (more kept layers never hurt much, so the gate is taken as
    monotone in it). `measure(kept)` gives `compare`'s figures with those layers unquantized.
    Returns the list (None when even all but one layer fail) and every count measured."""
    order = sorted(per_layer_kl, key=lambda layer: -per_layer_kl[layer])
    tried: dict[int, dict[str, float]] = {}

    def passes(count: int) -> bool:
        if count not in tried:
            tried[count] = measure(set(order[:count]))
        return tried[count]["top1_agreement"] >= TOP1_GATE and tried[count]["mean_kl"] <= KL_GATE

    lo, hi = 0, len(order) - 1  # the least count known to fail, the most worth trying
    if passes(lo):
        found: int | None = 0
    elif not passes(hi):
        found = None
    else:
        while hi - lo > 1:  # passes(hi), not passes(lo)
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if passes(mid) else (mid, hi)
        found = hi
    return {
        "order_worst_first": order,
        "skip_layers": sorted(order[:found]) if found is not None else None,
        "measured": {count: tried[count] for count in sorted(tried)},
    }


if __name__ == "__main__":
    main()

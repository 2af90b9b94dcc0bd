"""The tiny random Llama on the CPU with a small gpu tier, so most of a sequence's KV is cold: the
engine configuration of the cold-path end-to-end tests (sparse, prompt anchors, fill-only prefill)."""

from __future__ import annotations

from typing import Any

from kvspill.llm import LLM


def tiered_llm(model_dir: Any, **opts: Any) -> LLM:
    """5 gpu blocks of 8 tokens (the sink, an 8-token window and the step's blocks), 60 cpu blocks;
    `opts` override or add engine arguments."""
    base = dict(
        device="cpu",
        dtype="float32",
        block_size=8,
        max_model_len=512,
        enable_prefix_caching=False,
        num_kv_blocks=5,
        max_num_batched_tokens=16,
        num_sink_blocks=1,
        hot_window_tokens=8,
        num_cpu_kv_blocks=60,
    )
    return LLM(str(model_dir), **(base | opts))

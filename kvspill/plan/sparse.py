"""What `--cold-attention sparse` adds to a plan: the key summaries and the block cache on the GPU,
the cold bytes a decode step reads, and whether its steps replay CUDA graphs (which sets their
per-layer overhead, `costs.SparseCold`). Whether graphs are captured at all is the engine's
record (`plan/choices.py`); a sequence with disk blocks runs eagerly whatever it says."""

from __future__ import annotations

from kvspill.plan.choices import RuntimeChoices
from kvspill.plan.costs import SparseCold
from kvspill.plan.request import PlanRequest


def sparse_gpu_bytes(request: PlanRequest, cold_tokens: int) -> tuple[int, int]:
    """(key summaries, block cache) bytes on the GPU; (0, 0) unless sparse. A summary per cold-tier
    block (storage/summary.py) is 2 x head_dim values per layer and kv head: the KV bytes of one
    token (int8: fp16 summaries). The cache holds a budget's whole blocks per cached sequence."""
    if request.cold_attention != "sparse":
        return 0, 0
    bs = request.block_size
    summary_elem = 2 if request.kv_dtype == "int8" else request.kv_dtype_bytes
    if request.kv_skip_layers and request.kv_dtype != "auto":  # a mixed pool's: the model dtype's
        summary_elem = request.weight_dtype_bytes
    summaries = cold_tokens // bs * request.spec.kv_bytes_per_token(summary_elem)
    cache = request.sparse_cache_seqs * max(bs, request.sparse_budget_tokens // bs * bs)
    return summaries, cache * request.kv_bytes_per_token


def sparse_eager_reason(choices: RuntimeChoices, disk_tokens: int) -> str | None:
    """None when a sparse decode step of one sequence replays a CUDA graph
    (runner/sparse_graphs.py), else why it runs eagerly (2-3x slower, H200 W3 128K)."""
    if choices.sparse_eager_reason is not None:
        return choices.sparse_eager_reason
    return "cold blocks in the disk tier" if disk_tokens > 0 else None


def sparse_cold(
    request: PlanRequest, choices: RuntimeChoices, on_cpu: int, on_disk: int, summary_bytes: int
) -> SparseCold:
    """What a sparse decode row reads of `on_cpu + on_disk` cold tokens and how its steps run."""
    return SparseCold(
        min(1.0, request.sparse_budget_tokens / max(1, on_cpu + on_disk)),
        summary_bytes,
        cold_blocks=(on_cpu + on_disk) // request.block_size,
        graphs=sparse_eager_reason(choices, on_disk) is None,
    )

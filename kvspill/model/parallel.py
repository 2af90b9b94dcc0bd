"""Tensor parallelism inside the model: which slice of each weight a rank holds, and its collectives.

Megatron-LM's splits (Shoeybi et al. 2019), as vLLM lays them out:
- `qkv_proj` and `gate_up_proj` are column-parallel: rank r holds rows of its heads (q heads
  [r*H/N, (r+1)*H/N), KV heads [r*K/N, (r+1)*K/N): a rank's q heads read only its own KV heads
  under grouped-query attention) and of its slice of the intermediate width;
- `o_proj` and `down_proj` are row-parallel: rank r holds the matching input columns, and the
  partial outputs are summed by one all-reduce each (2 per layer); a row-parallel bias is held
  by rank 0 only (zeros elsewhere), so the sum adds it once;
- the embedding and `lm_head` are vocab-parallel: rank r holds rows [r*V', (r+1)*V') with
  V' = ceil(V/N) (the last shard zero-padded); an embedding lookup sums the ranks' rows (ids
  outside a shard give zeros there), logits are all-gathered and trimmed to V on every rank.
- Norms (and Qwen3's per-head q/k norms) are replicated.

Invariants:
- Every rank runs the same collectives in the same order: the same step contract reaches every
  rank (engine/parallel.py), so the model code has no rank-dependent control flow.
- The all-reduce and all-gather results are identical on every rank (NCCL and gloo reduce
  deterministically per call), so each rank samples the same tokens from the same logits.
- `size == 1` is the plain model: no collective, no padding, HF shapes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.nn import functional as F

from kvspill.errors import InvalidParameterError

# HF name pieces -> how a rank takes its slice. Column-parallel: rows (dim 0) by rank.
_COLUMN = (".q_proj.", ".k_proj.", ".v_proj.", ".gate_proj.", ".up_proj.")
_ROW = (".o_proj.", ".down_proj.")  # row-parallel: columns (dim 1) by rank, bias on rank 0
_VOCAB = ("embed_tokens.weight", "lm_head.weight")


@dataclass
class CollectiveTimer:
    """Time spent in the model's collectives, by CUDA events around each call (no profiler).

    Off by default: a benchmark turns it on, and `take()` (which waits for the device) adds up
    what was recorded since the last call."""

    enabled: bool = False
    _events: list[tuple[Any, Any]] = field(default_factory=list)

    def start(self, x: Tensor) -> Any:
        if not (self.enabled and x.is_cuda):
            return None
        begin = torch.cuda.Event(enable_timing=True)
        begin.record()
        return begin

    def stop(self, begin: Any) -> None:
        if begin is None:
            return
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        self._events.append((begin, end))

    def take(self) -> tuple[float, int]:
        """(seconds inside collectives, collectives timed) since the last call (0 when off)."""
        if not self._events:
            return 0.0, 0
        self._events[-1][1].synchronize()
        total = sum(b.elapsed_time(e) for b, e in self._events) / 1e3
        count = len(self._events)
        self._events.clear()
        return total, count


@dataclass
class TensorParallel:
    """This process's place in the tensor-parallel group and the collectives the model needs.

    `group` is the process group for tensors (NCCL on CUDA, gloo on the CPU); `control` a gloo
    group for small host-side agreements (None: the default group); both None with size 1."""

    rank: int = 0
    size: int = 1
    group: Any = None
    control: Any = None
    timer: CollectiveTimer = field(default_factory=CollectiveTimer)

    def min_over_ranks(self, values: list[int]) -> list[int]:
        """Each value's minimum over the ranks (e.g. KV blocks every rank can hold)."""
        if self.size == 1:
            return list(values)
        t = torch.tensor(values, dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MIN, group=self.control)
        return [int(v) for v in t.tolist()]

    def all_reduce(self, x: Tensor) -> Tensor:
        """Sum `x` over the ranks, in place."""
        if self.size == 1:
            return x
        begin = self.timer.start(x)
        dist.all_reduce(x, group=self.group)
        self.timer.stop(begin)
        return x

    def all_gather_last(self, x: Tensor) -> Tensor:
        """x: [..., d] on each rank -> [..., size * d], rank order along the last dim."""
        if self.size == 1:
            return x
        begin = self.timer.start(x)
        parts = [torch.empty_like(x) for _ in range(self.size)]
        dist.all_gather(parts, x.contiguous(), group=self.group)
        self.timer.stop(begin)
        return torch.cat(parts, dim=-1)

    def split(self, n: int, what: str) -> int:
        """This rank's share of `n` (heads, KV heads, intermediate width); exact or an error."""
        if n % self.size:
            raise InvalidParameterError(
                "tensor_parallel_size", f"{what} {n} does not split over {self.size} ranks"
            )
        return n // self.size

    def vocab_shard(self, vocab_size: int) -> int:
        """Rows of the embedding and lm_head each rank holds (the last shard zero-padded)."""
        return -(-vocab_size // self.size)


SINGLE = TensorParallel()


def valid_sizes(num_heads: int, num_kv_heads: int, intermediate_size: int, up_to: int = 8) -> list[int]:
    """Tensor-parallel sizes up to `up_to` that split a model's heads, KV heads and MLP exactly."""
    common = math.gcd(math.gcd(num_heads, num_kv_heads), intermediate_size)
    return [n for n in range(1, up_to + 1) if common % n == 0]


def check_splits(config: Any, size: int) -> None:
    """Raise with the sizes that work when `size` ranks cannot split this model's heads and MLP."""
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    inter = config.intermediate_size
    if heads % size == 0 and kv_heads % size == 0 and inter % size == 0:
        return
    raise InvalidParameterError(
        "tensor_parallel_size",
        f"--tensor-parallel-size {size} cannot split this model: it has {heads} attention heads, "
        f"{kv_heads} KV heads and an MLP of {inter}, and each rank needs a whole share of each "
        f"(KV heads are not replicated). Sizes that work: {valid_sizes(heads, kv_heads, inter)}",
    )


def is_row_parallel(name: str) -> bool:
    """Whether the HF-named weight `name` is split by input columns (o_proj, down_proj)."""
    return any(piece in name for piece in _ROW)


def shard_weight(
    name: str, tensor: Tensor, tp: TensorParallel, block: tuple[str, int] | None = None
) -> Tensor:
    """This rank's slice of the HF-named full tensor `tensor` (module docstring).

    `block`: the tensor is GGUF blocks [rows, bytes_per_row] of that (type, bytes per block): rows
    split as rows do, a row-parallel weight's columns on block boundaries (or an error)."""
    if tp.size == 1:
        return tensor
    r, n = tp.rank, tp.size
    if any(piece in name for piece in _COLUMN):
        return tensor.chunk(n, dim=0)[r]
    if is_row_parallel(name):
        if name.endswith(".bias"):
            return tensor if r == 0 else torch.zeros_like(tensor)
        if block is not None:
            qtype, type_size = block
            num_blocks = tensor.shape[1] // type_size
            if num_blocks % n:
                raise InvalidParameterError(
                    "tensor_parallel_size",
                    f"{name} holds {num_blocks} {qtype} blocks per row, which do not split over {n} ranks: "
                    "run another --tensor-parallel-size (a GGUF file also runs with --quantization none, "
                    "dequantized at load)",
                )
        return tensor.chunk(n, dim=1)[r].contiguous()
    if name.endswith(_VOCAB):
        shard = tp.vocab_shard(tensor.shape[0])
        rows = tensor[r * shard : (r + 1) * shard]
        if rows.shape[0] < shard:  # the last shard: pad with zero rows (their logits are trimmed)
            rows = torch.cat([rows, rows.new_zeros(shard - rows.shape[0], *rows.shape[1:])])
        return rows
    return tensor


class VocabParallelEmbedding(nn.Module):
    """An embedding whose rows are split over the ranks; the lookup sums the ranks' parts.

    `weight: [vocab_shard, hidden_size]` holds rows [rank * vocab_shard, (rank + 1) * vocab_shard)."""

    def __init__(
        self, vocab_size: int, hidden_size: int, tp: TensorParallel, dtype: torch.dtype | None
    ) -> None:
        super().__init__()
        self.tp = tp
        self.num_embeddings = vocab_size
        self.embedding_dim = hidden_size
        self.shard_rows = tp.vocab_shard(vocab_size)
        self.start = tp.rank * self.shard_rows
        self.weight = nn.Parameter(torch.empty(self.shard_rows, hidden_size, dtype=dtype))

    def forward(self, input_ids: Tensor) -> Tensor:
        # input_ids: [num_tokens] -> [num_tokens, hidden_size]
        local = input_ids - self.start
        outside = (local < 0) | (local >= self.shard_rows)
        x = F.embedding(local.masked_fill(outside, 0), self.weight)
        return self.tp.all_reduce(x.masked_fill(outside.unsqueeze(-1), 0))

    def extra_repr(self) -> str:
        return (
            f"{self.num_embeddings}, {self.embedding_dim}, rows {self.start}..{self.start + self.shard_rows}"
        )

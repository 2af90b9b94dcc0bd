"""Paged attention for one step: the runner's implementation of the model's `AttentionFn`.

A step's tokens are ordered decodes first (one query each), then prefill chunks. Each layer
call stores the new K/V into the paged cache through `slot_mapping`, then runs the split-KV
decode kernel over the decode queries and the paged prefill kernel over the rest, both
returning (o, lse). A pure decode step over gpu-tier KV hands RoPE and the store to the decode
kernel itself (`NewKV`, `fused_rope_decode`). On CUDA the Triton kernels run; elsewhere their torch references (the same
math, the tests' oracle), except that decode rows over a host pool read it in place with the
C++ kernel (`host_decode.py`) when it could be built.

KV tiers: the block tables and seq_lens given here cover each sequence's gpu-tier blocks only
(compacted, `runner/inputs.py`). For sequences with cold blocks, `metadata.cold` computes the
partial over those (`attention/cold/dispatch.py`): its q goes down before the gpu kernels are
enqueued, its result is merged with the gpu partial by LSE after them. Steps without cold
blocks have `cold = None` and run exactly as before.

A pool on the host with q on the GPU (a runner built so: the engine's `--attention cpu` runs
through the tiers instead, config.py): the layer's q/k/v go down, everything runs on the host, o
comes back up.

`--kv-cache-dtype int8`: q, k and v (after RoPE, which then runs on its own) change to the
Hadamard basis of the storage's `rotation(layer)` before the store and every attention path, and o
changes back (kernels/kv_quant.py): the kernels see an ordinary int8 pool.

Invariant: every metadata tensor lives on the cache's device; nothing in this module reads
global state, so the same object can be captured in a CUDA graph with static buffers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from kvspill.attention.cold.dispatch import ColdStep
from kvspill.attention.cold.merge import merge_partials
from kvspill.attention.sparse.anchor import AnchorCapture
from kvspill.env import switch_on
from kvspill.kernels.cpu_attention import CpuParts, load_kernel
from kvspill.kernels.decode_attention import paged_decode_attention, paged_decode_attention_ref
from kvspill.kernels.fused_ops import apply_rope
from kvspill.kernels.kv_quant import rotate, rotate_rows
from kvspill.kernels.prefill_attention import (
    paged_prefill_attention,
    paged_prefill_attention_cpu,
    paged_prefill_attention_ref,
)
from kvspill.kernels.rope_store import NewKV, rope_and_store_kv
from kvspill.kernels.store_kv import store_kv, store_kv_host
from kvspill.runner.host_decode import decode_parts, paged_decode_attention_host
from kvspill.runner.inputs import StepInputs
from kvspill.storage.storage import KVStorage


def fused_rope_decode() -> bool:
    """Whether pure decode steps hand RoPE and the K/V store to the decode kernel (read per call;
    KVSPILL_FUSED_ROPE_DECODE=0 keeps the rope_store kernel): one launch a layer fewer, measured in
    bench/results/2026-12-04-h200-rope-in-decode/."""
    return switch_on("FUSED_ROPE_DECODE")


@dataclass
class AttentionMetadata:
    """Tensors describing one step's attention (all on the KV device)."""

    slot_mapping: torch.Tensor  # [num_tokens] int64, -1 = padding (not stored)
    num_decodes: int  # the first num_decodes sequences (and tokens) are single-query decodes
    decode_block_tables: torch.Tensor  # [num_decodes, max_blocks_per_seq] int32
    decode_seq_lens: torch.Tensor  # [num_decodes] int32, context incl. the new token
    prefill_block_tables: torch.Tensor  # [num_prefills, max_blocks_per_seq] int32
    prefill_query_start_loc: torch.Tensor  # [num_prefills + 1] int32, relative to the first prefill token
    prefill_seq_lens: torch.Tensor  # [num_prefills] int32
    prefill_max_query_len: int = 0  # longest prefill chunk (saves the kernel a device sync)
    decode_num_splits: int | None = None  # fixed split count (CUDA graphs) or None = auto
    cold: ColdStep | None = None  # sequences with cpu/disk blocks this step; None: all KV on the gpu tier
    # sparse with --sparse-prompt-window: the prompt-end queries to keep (attention/sparse/anchor.py)
    anchor_capture: AnchorCapture | None = None
    skip_prefill_attention: bool = False  # benchmarks: prefill rows store K/V, their output is 0

    @property
    def num_prefills(self) -> int:
        return int(self.prefill_seq_lens.shape[0])


def to_device(a: np.ndarray, device: torch.device) -> torch.Tensor:
    t = torch.from_numpy(a)
    return t.to(device, non_blocking=True) if device.type == "cuda" else t


def build_attention_metadata(
    inputs: StepInputs,
    device: torch.device,
    cold: ColdStep | None,
    anchor_capture: AnchorCapture | None = None,
) -> AttentionMetadata:
    """The step's metadata on the KV `device`: compacted gpu block tables and gpu seq_lens."""
    nd = inputs.num_decodes
    qsl = inputs.query_start_loc
    return AttentionMetadata(
        slot_mapping=to_device(inputs.slot_mapping, device),
        num_decodes=nd,
        decode_block_tables=to_device(inputs.block_tables[:nd], device),
        decode_seq_lens=to_device(inputs.gpu_seq_lens[:nd], device),
        prefill_block_tables=to_device(inputs.block_tables[nd:], device),
        prefill_query_start_loc=to_device(
            (qsl[nd:] - nd).astype(np.int32), device
        ),  # decodes: one token each
        prefill_seq_lens=to_device(inputs.gpu_seq_lens[nd:], device),
        prefill_max_query_len=int(np.diff(qsl[nd:]).max()) if len(qsl) > nd + 1 else 0,
        cold=cold,
        anchor_capture=anchor_capture,
    )


class PagedAttention:
    """Callable `(layer_idx, q, k, v) -> o` over a `KVStorage` for one step's metadata."""

    def __init__(self, storage: KVStorage, metadata: AttentionMetadata, scale: float) -> None:
        self.storage = storage
        self.metadata = metadata
        self.scale = scale
        self.use_triton = storage.device.type == "cuda"
        self.fuses_rope = self.use_triton  # the model hands over RoPE (model/base.py AttentionFn)
        # A pool in host RAM: decode rows read it in place with the C++ kernel (host_decode.py);
        # without a compiler, the torch reference. Its parts are the same in every layer.
        self.host_kernel = not self.use_triton and load_kernel() is not None
        self._host_parts: CpuParts | None = None

    def __call__(
        self,
        layer_idx: int,
        q: torch.Tensor,  # [num_tokens, num_heads, head_dim]
        k: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
        v: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
        rope: tuple[torch.Tensor, torch.Tensor]
        | None = None,  # (positions, cos_sin_cache): q, k not rotated yet
    ) -> torch.Tensor:
        kv_device = self.storage.kv_cache.device  # normalized ("cuda:0", not "cuda")
        if q.device != kv_device:  # --attention cpu: the pool and all attention on the host
            assert rope is None, "fuses_rope is off when the pool is on another device"
            return self(layer_idx, q.to(kv_device), k.to(kv_device), v.to(kv_device)).to(q.device)
        basis = self.storage.rotation(layer_idx)  # None but for int8 layers
        if basis is not None:  # int8 KV: attend in the Hadamard basis, o turned back (kv_quant.py)
            if rope is not None:
                apply_rope(q, k, rope[0], rope[1])
            # k, v stay fp32 for the store's quantization; q returns to its dtype for the kernels
            q_b, k_b, v_b = rotate_rows((q, k, v), basis)
            o = self._attend(layer_idx, q_b.to(q.dtype), k_b, v_b, None)
            return rotate(o, basis).to(q.dtype)
        return self._attend(layer_idx, q, k, v, rope)

    def _decode_takes_rope(self, kv_layer: torch.Tensor) -> bool:
        """Whether the decode kernel does RoPE and the K/V store itself (`NewKV`): a pure decode
        step on the Triton path whose q is seen by nothing else (no cold tier, no anchor capture)."""
        meta = self.metadata
        return (
            fused_rope_decode()
            and self.use_triton
            and not self.host_kernel
            and meta.num_prefills == 0
            and meta.cold is None
            and meta.anchor_capture is None
            and kv_layer.dtype != torch.int8
        )

    def _decode_rows(
        self,
        q: torch.Tensor,
        kv_layer: torch.Tensor,
        out: torch.Tensor,
        lse: torch.Tensor,
        new_kv: NewKV | None = None,
    ) -> None:
        """The decode rows (one query each) over their gpu-tier blocks, into (out, lse); with
        `new_kv`, the kernel rotates q and k and stores k, v first."""
        meta = self.metadata
        if self.host_kernel:
            if self._host_parts is None:
                self._host_parts = decode_parts(
                    meta.decode_block_tables, meta.decode_seq_lens, self.storage.layout.block_size
                )
            paged_decode_attention_host(q, kv_layer, self._host_parts, self.scale, (out, lse))
            return
        decode = paged_decode_attention if self.use_triton else paged_decode_attention_ref
        decode(
            q,
            kv_layer,
            meta.decode_block_tables,
            meta.decode_seq_lens,
            self.scale,
            num_splits=meta.decode_num_splits,
            out=(out, lse),
            new_kv=new_kv,
        )

    def _prefill_rows(
        self, q: torch.Tensor, kv_layer: torch.Tensor, out: torch.Tensor, lse: torch.Tensor
    ) -> None:
        """The prefill chunks' rows over their gpu-tier blocks (causal), into (out, lse)."""
        meta = self.metadata
        args = (q, kv_layer, meta.prefill_block_tables, meta.prefill_query_start_loc, meta.prefill_seq_lens)
        if self.use_triton:
            paged_prefill_attention(
                *args, self.scale, out=(out, lse), max_query_len=meta.prefill_max_query_len or None
            )
        elif q.device.type == "cpu":
            paged_prefill_attention_cpu(*args, self.scale, out=(out, lse))
        else:
            paged_prefill_attention_ref(*args, self.scale, out=(out, lse))

    def _attend(
        self,
        layer_idx: int,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> torch.Tensor:
        """Store k, v and attend (see `__call__`), all on the KV device."""
        meta = self.metadata
        kv_layer = self.storage.layer(layer_idx)
        new_kv = None
        if rope is not None and self._decode_takes_rope(kv_layer):
            new_kv = NewKV(k, v, rope[0], rope[1], meta.slot_mapping)
        elif rope is not None:
            rope_and_store_kv(q, k, v, rope[0], rope[1], kv_layer, meta.slot_mapping)
        if meta.anchor_capture is not None:  # q as every attention path sees it (RoPE, int8's basis)
            meta.anchor_capture.store(layer_idx, q)
        cold_work = meta.cold.begin(layer_idx, q) if meta.cold is not None else None
        if rope is None:
            (store_kv if self.use_triton else store_kv_host)(k, v, kv_layer, meta.slot_mapping)
        out = torch.empty_like(q)
        lse = torch.empty(q.shape[:2], dtype=torch.float32, device=q.device)  # [num_tokens, num_heads]
        nd = meta.num_decodes
        if nd:
            self._decode_rows(q[:nd], kv_layer, out[:nd], lse[:nd], new_kv)
        if meta.num_prefills and meta.skip_prefill_attention:
            out[nd:] = 0
        elif meta.num_prefills:
            self._prefill_rows(q[nd:], kv_layer, out[nd:], lse[nd:])
        if cold_work is not None:
            assert meta.cold is not None
            o_cold, lse_cold = meta.cold.finish(cold_work)
            rows = meta.cold.rows
            merged, _ = merge_partials(out.index_select(0, rows), lse.index_select(0, rows), o_cold, lse_cold)
            out.index_copy_(0, rows, merged)
        return out

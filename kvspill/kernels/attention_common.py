"""Pieces shared by the paged attention kernels (prefill and decode) and their torch references:
the walk over a query tile's keys (`attend_keys`: unmasked tiles, then masked ones) and its
online-softmax step over one tile of paged keys (`attend_tile`), the dense fp32 reference,
the gather of one sequence's K/V, and the wrappers' argument checks.

Pool formats (`kernels/kv_quant.py`): the model dtype and fp8 are widened in registers; int8
blocks hold a value plane (`kv_quant.kv_strides`) and a plane of fp32 row scales, read through a
second pointer to the same memory as fp32 (`kv_quant.scale_view`, `store_kv.int8_scale_index`).
The K scale multiplies the tile's scores (q . k_int * s_k) and the V scale the probabilities
(sum p * s_v * v_int): int8 values are exact in every compute dtype, so the only rounding is the
scale's product in fp32.
"""

from __future__ import annotations

import torch

from kvspill.kernels.kv_quant import FP8_DTYPES, dequantize_kv, value_dim
from kvspill.kernels.store_kv import int8_scale_index
from kvspill.kernels.triton_compat import tl, triton

# Bounds the fp32 score matrix of the reference (heads x query rows x keys) to about 256 MiB.
_REF_MAX_SCORE_ELEMS = 1 << 26


def gather_seq_kv(
    kv_layer: torch.Tensor,  # [num_blocks, 2, block_size, num_kv_heads, row_dim]
    block_table: torch.Tensor,  # [max_blocks_per_seq] int
    seq_len: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense copies of one seq's keys and values, each [seq_len, num_kv_heads, head_dim]: in the
    pool's dtype, or dequantized to fp32 from an int8 pool."""
    _, _, block_size, num_kv_heads, _ = kv_layer.shape
    head_dim = value_dim(kv_layer)
    num_seq_blocks = -(-seq_len // block_size)
    blocks = kv_layer.index_select(0, block_table[:num_seq_blocks].long())
    if blocks.dtype == torch.int8:
        blocks = dequantize_kv(blocks)
    # blocks: [num_seq_blocks, 2, block_size, num_kv_heads, head_dim]
    k = blocks[:, 0].reshape(num_seq_blocks * block_size, num_kv_heads, head_dim)[:seq_len]
    v = blocks[:, 1].reshape(num_seq_blocks * block_size, num_kv_heads, head_dim)[:seq_len]
    return k, v


# torch's CPU flash attention, which returns the logsumexp too (SDPA drops it); None in builds
# without it. The CPU prefill (prefill_attention.paged_prefill_attention_cpu) and the cold tiers'
# unmasked CPU attention (attention/cold/merge.attend_unmasked_cpu) both call it.
CPU_FLASH = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def dense_attention_ref(
    q: torch.Tensor,  # [q_len, num_heads, head_dim]
    k: torch.Tensor,  # [seq_len, num_kv_heads, head_dim]
    v: torch.Tensor,  # [seq_len, num_kv_heads, head_dim]
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Bottom-right causal GQA attention of one seq in fp32: query i sits at seq_len - q_len + i.

    Returns o: [q_len, num_heads, head_dim] float32 and lse: [q_len, num_heads] float32; with
    seq_len == 0 o is 0 and lse is -inf. Query rows are processed in chunks to bound memory.
    """
    q_len, num_heads, head_dim = q.shape
    seq_len, num_kv_heads, _ = k.shape
    group = num_heads // num_kv_heads
    o = q.new_zeros((q_len, num_heads, head_dim), dtype=torch.float32)
    lse = q.new_full((q_len, num_heads), float("-inf"), dtype=torch.float32)
    if seq_len == 0 or q_len == 0:
        return o, lse
    kf = k.float().transpose(0, 1)  # [num_kv_heads, seq_len, head_dim]
    vf = v.float().transpose(0, 1)
    key_pos = torch.arange(seq_len, device=q.device)
    chunk = max(1, _REF_MAX_SCORE_ELEMS // (num_heads * seq_len))
    for t0 in range(0, q_len, chunk):
        t1 = min(q_len, t0 + chunk)
        n = t1 - t0
        # qg: [num_kv_heads, group * n, head_dim], rows ordered (group, token)
        qg = q[t0:t1].float().view(n, num_kv_heads, group, head_dim).permute(1, 2, 0, 3)
        qg = qg.reshape(num_kv_heads, group * n, head_dim)
        scores = torch.bmm(qg, kf.transpose(1, 2)).mul_(scale)  # [num_kv_heads, group * n, seq_len]
        q_pos = torch.arange(seq_len - q_len + t0, seq_len - q_len + t1, device=q.device)
        hidden = key_pos[None, :] > q_pos[:, None]  # [n, seq_len]
        scores.view(num_kv_heads, group, n, seq_len).masked_fill_(hidden, float("-inf"))
        chunk_lse = torch.logsumexp(scores, dim=-1)  # [num_kv_heads, group * n]
        probs = scores.sub_(chunk_lse[..., None]).exp_()
        chunk_o = torch.bmm(probs, vf)  # [num_kv_heads, group * n, head_dim]
        o[t0:t1] = (
            chunk_o.view(num_kv_heads, group, n, head_dim).permute(2, 0, 1, 3).reshape(n, num_heads, head_dim)
        )
        lse[t0:t1] = chunk_lse.view(num_kv_heads, group, n).permute(2, 0, 1).reshape(n, num_heads)
    return o, lse


def resolve_out(
    out: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None, q: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, lse) buffers: `out` may give o alone, both, or neither."""
    o, lse = out if isinstance(out, tuple) else (out, None)
    if o is None:
        o = torch.empty_like(q)
    if lse is None:
        lse = torch.empty(q.shape[:2], dtype=torch.float32, device=q.device)
    assert o.shape == q.shape and o.dtype == q.dtype and o.device == q.device, (
        f"out o must be {q.dtype} {tuple(q.shape)} on {q.device}, got {o.dtype} {tuple(o.shape)}"
    )
    assert lse.shape == q.shape[:2] and lse.dtype == torch.float32 and lse.device == q.device, (
        f"out lse must be float32 {tuple(q.shape[:2])}, got {lse.dtype} {tuple(lse.shape)}"
    )
    assert o.stride(-1) == 1, "o's head_dim must be contiguous"
    return o, lse


def check_kv_layer(kv_layer: torch.Tensor, q: torch.Tensor) -> torch.Size:
    """Asserts the layer view matches q (dtype, device, head_dim) and returns its shape."""
    assert kv_layer.dim() == 5 and kv_layer.shape[1] == 2, f"kv_layer shape {tuple(kv_layer.shape)}"
    head_dim = q.shape[-1]
    assert kv_layer.dtype in (q.dtype, *FP8_DTYPES, torch.int8), (
        f"kv_layer {kv_layer.dtype} != q {q.dtype} (nor fp8, int8)"
    )
    assert value_dim(kv_layer) == head_dim, f"kv_layer head_dim {value_dim(kv_layer)} != q's {head_dim}"
    assert kv_layer.device == q.device, f"kv_layer on {kv_layer.device}, q on {q.device}"
    assert kv_layer.stride(4) == 1 and q.stride(-1) == 1, "head_dim must be the contiguous dimension"
    assert head_dim >= 16 and head_dim & (head_dim - 1) == 0, f"head_dim {head_dim}: power of two >= 16"
    block_size = kv_layer.shape[2]
    assert block_size & (block_size - 1) == 0, f"block_size {block_size} must be a power of two"
    return kv_layer.shape


def dot_precision(dtype: torch.dtype) -> str:
    """tl.dot's input precision for q's dtype (it matters for fp32 inputs only): tf32x3 is
    fp32-accurate on tensor cores."""
    return "tf32x3" if dtype == torch.float32 else "tf32"


@triton.jit
def _dot(a, b, acc, DOT_PRECISION: tl.constexpr, DOT_IN_F32: tl.constexpr):
    """a @ b (+ acc) in fp32. DOT_IN_F32 is for the interpreter only: its tl.dot multiplies the
    uint16 bit patterns of bf16 operands as integers (triton 3.9 create_dot); fp32 operands
    holding the same bf16 values give the tensor-core result up to summation order."""
    if DOT_IN_F32:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    return tl.dot(a, b, acc, input_precision=DOT_PRECISION)


@triton.jit
def _row_scales(
    scale_ptr,
    block_ids,
    in_block,
    stride_cb,
    stride_ckv,
    keys,
    last_pos,
    HEAD_DIM: tl.constexpr,
    MASKED: tl.constexpr,
):
    """fp32 scales of the int8 rows at block_ids * stride_cb + in_block [BLOCK_N] (0 past last_pos)."""
    ptrs = scale_ptr + int8_scale_index(block_ids, in_block, stride_cb, stride_ckv, HEAD_DIM)
    if MASKED:
        return tl.load(ptrs, mask=keys <= last_pos, other=0.0)
    return tl.load(ptrs)


@triton.jit
def key_rows(bt_row, keys, last_pos, stride_cs, head_off, BLOCK_SIZE: tl.constexpr, MASKED: tl.constexpr):
    """Where each key of the tile lies: (block_ids [BLOCK_N] int64 through the block table,
    in_block [BLOCK_N] the row's offset within its block). MASKED: keys past last_pos read
    block 0 instead of table entries that may not exist."""
    if MASKED:
        block_ids = tl.load(bt_row + keys // BLOCK_SIZE, mask=keys <= last_pos, other=0).to(tl.int64)
    else:
        block_ids = tl.load(bt_row + keys // BLOCK_SIZE).to(tl.int64)
    in_block = (keys % BLOCK_SIZE) * stride_cs + head_off
    return block_ids, in_block


@triton.jit
def _load_rows(ptrs, keys, last_pos, MASKED: tl.constexpr, INT8: tl.constexpr):
    """The tile's K or V rows [BLOCK_N, HEAD_DIM] as stored (int8 pools: as fp32); MASKED: rows
    past last_pos are 0."""
    if MASKED:
        rows = tl.load(ptrs, mask=(keys <= last_pos)[:, None], other=0.0)
    else:
        rows = tl.load(ptrs)
    if INT8:  # through fp32: Triton's interpreter casts int8 to bf16 wrongly; exact either way
        rows = rows.to(tl.float32)
    return rows


@triton.jit
def _online_softmax_step(qk, m_i, l_i):
    """Folds one tile of scores qk [ROWS, BLOCK_N] (log2 units) into the running max m_i and sum
    l_i. Returns the tile's probabilities p = 2**(qk - m_new), alpha = 2**(m_i - m_new) (the
    rescale of everything accumulated so far), m_new and the new l_i."""
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    p = tl.exp2(qk - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    return p, alpha, m_new, l_i


@triton.jit
def attend_tile(
    acc,
    m_i,
    l_i,
    q,
    kv_ptr,
    scale_ptr,
    bt_row,
    start,
    q_pos,
    last_pos,
    scale_log2,
    stride_cb,
    stride_ckv,
    stride_cs,
    head_off,
    BLOCK_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    DOT_IN_F32: tl.constexpr,
    INT8: tl.constexpr,
):
    """One online-softmax step over keys start..start+BLOCK_N (scores in log2 units). The strides
    come from `kv_quant.kv_strides`. INT8: the pool's blocks hold a value plane and a plane of fp32 row
    scales, read through `scale_ptr` (the same memory as fp32: `int8_scale_index`)."""
    keys = start + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, HEAD_DIM)
    block_ids, in_block = key_rows(bt_row, keys, last_pos, stride_cs, head_off, BLOCK_SIZE, MASKED)
    kv_off = block_ids * stride_cb + in_block
    kv_ptrs = kv_ptr + kv_off[:, None] + dims[None, :]  # [BLOCK_N, HEAD_DIM]
    # fp8 KV (--kv-cache-dtype, scale 1): widened in registers; otherwise a no-op
    k = _load_rows(kv_ptrs, keys, last_pos, MASKED, INT8).to(q.dtype)
    qk = _dot(q, tl.trans(k), None, DOT_PRECISION, DOT_IN_F32) * scale_log2  # [BLOCK_M, BLOCK_N]
    if INT8:
        k_scale = _row_scales(
            scale_ptr, block_ids, in_block, stride_cb, stride_ckv, keys, last_pos, HEAD_DIM, MASKED
        )
        qk = qk * k_scale[None, :]
    if MASKED:
        qk = tl.where(keys[None, :] <= q_pos[:, None], qk, float("-inf"))
    p, alpha, m_new, l_i = _online_softmax_step(qk, m_i, l_i)
    v = _load_rows(kv_ptrs + stride_ckv, keys, last_pos, MASKED, INT8).to(q.dtype)
    if INT8:  # the V scales weight the probabilities: sum_n p[n] * s_v[n] * v_int[n]
        v_in_block = in_block + stride_ckv
        v_scale = _row_scales(
            scale_ptr, block_ids, v_in_block, stride_cb, stride_ckv, keys, last_pos, HEAD_DIM, MASKED
        )
        p = p * v_scale[None, :]
    acc = _dot(p.to(v.dtype), v, acc * alpha[:, None], DOT_PRECISION, DOT_IN_F32)
    return acc, m_new, l_i


@triton.jit
def attend_keys(
    q,
    kv_ptr,
    scale_ptr,
    bt_row,
    head_off,
    q_pos,
    first_key,
    full_end,
    last_pos,
    scale_log2,
    stride_cb,
    stride_ckv,
    stride_cs,
    BLOCK_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    DOT_IN_F32: tl.constexpr,
    INT8: tl.constexpr,
):
    """Attention state of q's rows [ROWS, HEAD_DIM] over keys first_key..last_pos, a tile of
    BLOCK_N keys at a time: (acc [ROWS, HEAD_DIM], m_i [ROWS], l_i [ROWS]), fp32, log2 units.
    Tiles from first_key up to full_end are visible to every row and skip the mask; the tiles
    from full_end to last_pos are masked (key <= q_pos of the row and <= last_pos)."""
    m_i = tl.full([q.shape[0]], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([q.shape[0]], dtype=tl.float32)
    acc = tl.zeros([q.shape[0], HEAD_DIM], dtype=tl.float32)
    # Two loops, one body: the static range unrolls at compile time, so each loop gets its own
    # attend_tile specialized on MASKED.
    for masked in tl.static_range(2):
        lo = full_end if masked == 1 else first_key
        hi = last_pos + 1 if masked == 1 else full_end
        for start in range(lo, hi, BLOCK_N):
            acc, m_i, l_i = attend_tile(
                acc,
                m_i,
                l_i,
                q,
                kv_ptr,
                scale_ptr,
                bt_row,
                start,
                q_pos,
                last_pos,
                scale_log2,
                stride_cb,
                stride_ckv,
                stride_cs,
                head_off,
                BLOCK_SIZE,
                HEAD_DIM,
                BLOCK_N,
                masked == 1,
                DOT_PRECISION,
                DOT_IN_F32,
                INT8,
            )
    return acc, m_i, l_i

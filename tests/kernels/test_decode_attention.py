"""Paged decode attention: reference vs dense float64, split-KV kernel vs reference, num_splits."""

from __future__ import annotations

import pytest
import torch

from kvspill.kernels import decode_attention
from kvspill.kernels.decode_attention import (
    MAX_SPLITS,
    SHORT_TILE_SEQS,
    _launch_config,
    choose_num_splits,
    merge_dim_block,
    paged_decode_attention,
    paged_decode_attention_ref,
)
from kvspill.kernels.kv_quant import dequantize_kv, quantize_kv
from kvspill.kernels.rope_store import NewKV, rope_and_store_kv

# Empty seq, one token, one short of a block, not a block multiple, several splits' worth.
SEQ_LENS = [0, 1, 15, 37, 70]


def _make_batch(
    make_paged_kv, seq_lens, num_heads, num_kv_heads, head_dim, block_size, dtype, device, seed=0
):
    paged = make_paged_kv(seq_lens, num_kv_heads, head_dim, block_size, dtype, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    q = torch.randn((len(seq_lens), num_heads, head_dim), generator=gen).to(dtype).to(device)
    return paged, q


def _poisoned_out(q):
    o = torch.full_like(q, float("nan"))
    return o, torch.full(q.shape[:2], float("nan"), dtype=torch.float32, device=q.device)


@pytest.mark.parametrize("num_heads, num_kv_heads", [(4, 4), (8, 2), (10, 2), (8, 1)])
def test_reference_matches_dense(make_paged_kv, dense_attention, num_heads, num_kv_heads, device):
    paged, q = _make_batch(make_paged_kv, SEQ_LENS, num_heads, num_kv_heads, 32, 16, torch.float32, device)
    o, lse = paged_decode_attention_ref(q, paged.kv_layer, paged.block_tables, paged.seq_lens, 0.3)
    assert torch.equal(o[0], torch.zeros_like(o[0])) and torch.isneginf(lse[0]).all()
    for s in range(1, len(SEQ_LENS)):
        k, v = paged.keys[s], paged.values[s]
        o_d, lse_d = dense_attention(q[s : s + 1], k, v, 0.3)
        torch.testing.assert_close(o[s].double(), o_d[0], atol=1e-5, rtol=1e-5)
        # lse is the logsumexp of the scores, computed here the long way.
        group = num_heads // num_kv_heads
        scores = torch.einsum("hd,khd->hk", q[s].double(), k.double().repeat_interleave(group, 1)) * 0.3
        torch.testing.assert_close(lse[s].double(), torch.logsumexp(scores, -1), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "dtype, num_heads, num_kv_heads, head_dim, block_size, num_splits",
    [
        (torch.float32, 4, 2, 16, 8, 1),
        (torch.float32, 8, 8, 32, 16, 3),
        (torch.float16, 8, 2, 32, 16, 4),
        (torch.bfloat16, 8, 1, 64, 16, None),
        (torch.bfloat16, 12, 2, 32, 32, 8),
        (torch.bfloat16, 3, 1, 128, 8, 2),
    ],
)
def test_kernel_matches_reference(
    make_paged_kv, tol, dtype, num_heads, num_kv_heads, head_dim, block_size, num_splits, device
):
    paged, q = _make_batch(
        make_paged_kv, SEQ_LENS, num_heads, num_kv_heads, head_dim, block_size, dtype, device
    )
    args = (paged.kv_layer, paged.block_tables, paged.seq_lens, 0.2)
    o_ref, lse_ref = paged_decode_attention_ref(q, *args)
    o, lse = paged_decode_attention(
        q, *args, num_splits=num_splits, out=_poisoned_out(q), min_split_tokens=16
    )
    assert not o.isnan().any() and not lse.isnan().any(), "kernel left outputs unwritten"
    assert torch.isneginf(lse[0]).all() and not o[0].any(), "seq_len 0 must give o = 0, lse = -inf"
    torch.testing.assert_close(o.float(), o_ref.float(), **tol[dtype])
    torch.testing.assert_close(lse, lse_ref, atol=1e-4, rtol=1e-5)


def test_kernel_split_count_does_not_change_result(make_paged_kv, device):
    """More splits than a seq has keys (empty splits write lse = -inf) merge to the same answer."""
    paged, q = _make_batch(make_paged_kv, [70, 5], 4, 2, 32, 8, torch.float32, device, seed=5)
    args = (paged.kv_layer, paged.block_tables, paged.seq_lens, 0.2)
    results = [paged_decode_attention(q, *args, num_splits=n, min_split_tokens=16) for n in (1, 2, 7)]
    for o, lse in results[1:]:
        torch.testing.assert_close(o, results[0][0], atol=2e-6, rtol=1e-5)
        torch.testing.assert_close(lse, results[0][1], atol=2e-6, rtol=1e-6)


@pytest.mark.parametrize("head_dim", [64, 128])
def test_merge_splits_a_head_over_programs_when_rows_are_few(make_paged_kv, tol, head_dim, device):
    """Fewer (seq, head) rows than SMs: each head's merge runs over several programs (dims)."""
    num_sms = torch.cuda.get_device_properties(device).multi_processor_count if device == "cuda" else 4
    assert merge_dim_block(2, head_dim, num_sms) < head_dim
    paged, q = _make_batch(make_paged_kv, [37], 2, 1, head_dim, 8, torch.bfloat16, device, seed=4)
    args = (paged.kv_layer, paged.block_tables, paged.seq_lens, 0.2)
    o_ref, lse_ref = paged_decode_attention_ref(q, *args)
    o, lse = paged_decode_attention(q, *args, num_splits=3, out=_poisoned_out(q), min_split_tokens=16)
    torch.testing.assert_close(o.float(), o_ref.float(), **tol[torch.bfloat16])
    torch.testing.assert_close(lse, lse_ref, atol=1e-4, rtol=1e-5)


def test_merge_dim_block():
    assert merge_dim_block(32, 128, 132) == 32  # batch 1 of an 8B: 4 programs a head
    assert merge_dim_block(256, 128, 132) == 128  # enough rows: one program a head
    assert merge_dim_block(16, 64, 132) == 32
    assert merge_dim_block(16, 32, 132) == 32


def test_kernel_strided_q_and_out_o_only(make_paged_kv, tol, device):
    num_heads, num_kv_heads, head_dim = 4, 2, 32
    paged = make_paged_kv([19, 40], num_kv_heads, head_dim, 16, torch.bfloat16, seed=2)
    qkv = torch.randn((2, num_heads + 2 * num_kv_heads, head_dim), generator=torch.Generator().manual_seed(1))
    q = qkv.to(torch.bfloat16).to(device)[:, :num_heads]
    args = (paged.kv_layer, paged.block_tables, paged.seq_lens, 0.2)
    o_ref, lse_ref = paged_decode_attention_ref(q, *args)
    o_buf = torch.full((2, num_heads, head_dim), float("nan"), dtype=torch.bfloat16, device=device)
    o, lse = paged_decode_attention(q, *args, num_splits=2, out=o_buf, min_split_tokens=16)
    assert o is o_buf
    torch.testing.assert_close(o, o_ref, **tol[torch.bfloat16])
    torch.testing.assert_close(lse, lse_ref, atol=1e-4, rtol=1e-5)


def test_choose_num_splits():
    # Batch 1, 8 KV heads on 132 SMs: 4 programs per SM -> 66 splits once the context allows.
    assert choose_num_splits(131072, 1, 8, 132) == 66
    assert choose_num_splits(8192, 1, 8, 132) == 32  # capped by 256-token splits
    assert choose_num_splits(1000, 1, 8, 132) == 4
    assert choose_num_splits(131072, 8, 8, 132) == 8  # 512 programs: one wave of 528, not 576
    assert choose_num_splits(2048, 32, 8, 132) == 2  # 512 programs, not 768 (1.45 waves)
    assert choose_num_splits(131072, 128, 8, 132) == 1  # enough programs without splitting
    assert choose_num_splits(0, 1, 8, 132) == 1
    assert choose_num_splits(10**7, 1, 1, 1000) == MAX_SPLITS
    assert choose_num_splits(4096, 1, 8, 132, min_split_tokens=1024) == 4


def test_launch_config_by_batch():
    """head_dim 128 on a GPU: 64-key tiles, 32-key tiles on two warps for 4-8 sequences, three
    stages from 32; the interpreter's small tiles whatever the batch."""
    assert SHORT_TILE_SEQS == (4, 8)
    assert _launch_config(128, True, 1) == (64, 4, 2)
    assert _launch_config(128, True, 2) == (64, 4, 2)
    assert [_launch_config(128, True, n) for n in (4, 6, 8)] == [(32, 2, 3)] * 3
    assert _launch_config(128, True, 16) == (64, 4, 2)
    assert _launch_config(128, True, 32) == (64, 4, 3)
    assert _launch_config(64, True, 8) == (64, 2, 2)
    assert _launch_config(256, True, 8) == (32, 4, 2)
    assert _launch_config(128, False, 8) == (16, 4, 1)


def test_kernel_with_short_key_tiles(make_paged_kv, tol, monkeypatch, device):
    """The 4-8-sequence tiles (32 keys) against the reference: splits of whole 32-key tiles over
    16-token blocks, partial last tiles, an empty sequence (the launch config forced, so the
    interpreter runs it too)."""
    monkeypatch.setattr(decode_attention, "_launch_config", lambda *a: (32, 2, 3))
    seq_lens = [0, 31, 33, 100, 130, 64]
    paged, q = _make_batch(make_paged_kv, seq_lens, 8, 2, 32, 16, torch.bfloat16, device, seed=7)
    args = (paged.kv_layer, paged.block_tables, paged.seq_lens, 0.2)
    o_ref, lse_ref = paged_decode_attention_ref(q, *args)
    for num_splits in (None, 3):
        o, lse = paged_decode_attention(
            q, *args, num_splits=num_splits, out=_poisoned_out(q), min_split_tokens=16
        )
        assert not o.isnan().any() and not lse.isnan().any(), "kernel left outputs unwritten"
        torch.testing.assert_close(o.float(), o_ref.float(), **tol[torch.bfloat16])
        torch.testing.assert_close(lse, lse_ref, atol=1e-4, rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    "num_heads, num_kv_heads, head_dim", [(32, 8, 64), (32, 8, 128), (14, 2, 64), (8, 2, 256)]
)
def test_kernel_real_tiles_on_gpu(make_paged_kv, tol, num_heads, num_kv_heads, head_dim):
    """GPU tile sizes, automatic splits, contexts of thousands of tokens."""
    paged, q = _make_batch(
        make_paged_kv, [5000, 1, 777, 3000], num_heads, num_kv_heads, head_dim, 16, torch.bfloat16, "cuda"
    )
    args = (paged.kv_layer, paged.block_tables, paged.seq_lens, head_dim**-0.5)
    o_ref, lse_ref = paged_decode_attention_ref(q, *args)
    o, lse = paged_decode_attention(q, *args, out=_poisoned_out(q))
    torch.testing.assert_close(o.float(), o_ref.float(), **tol[torch.bfloat16])
    torch.testing.assert_close(lse, lse_ref, atol=1e-3, rtol=1e-4)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_graph_replay_with_new_seq_lens(make_paged_kv, tol):
    """The wrapper captures once and replays correctly after seq_lens (values only) change."""
    paged, q = _make_batch(make_paged_kv, [3000, 900], 32, 8, 128, 16, torch.bfloat16, "cuda")
    args = (paged.kv_layer, paged.block_tables, paged.seq_lens, 0.1)
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[:2], dtype=torch.float32, device="cuda")
    paged_decode_attention(q, *args, out=(o, lse))  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        paged_decode_attention(q, *args, out=(o, lse))
    paged.seq_lens.copy_(torch.tensor([1200, 17], dtype=torch.int32))
    graph.replay()
    o_ref, lse_ref = paged_decode_attention_ref(q, *args)
    torch.testing.assert_close(o.float(), o_ref.float(), **tol[torch.bfloat16])
    torch.testing.assert_close(lse, lse_ref, atol=1e-3, rtol=1e-4)


@pytest.mark.parametrize("fp8", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_kernel_reads_fp8_cache(make_paged_kv, tol, fp8, device):
    """--kv-cache-dtype fp8: the kernel widens the stored values as the reference does (.float())."""
    paged, q = _make_batch(make_paged_kv, SEQ_LENS, 8, 2, 32, 16, torch.bfloat16, device)
    kv_fp8 = paged.kv_layer.float().clamp(-448, 448).to(fp8)
    args = (kv_fp8, paged.block_tables, paged.seq_lens, 0.2)
    o_ref, lse_ref = paged_decode_attention_ref(q, *args)
    o, lse = paged_decode_attention(q, *args, num_splits=2, out=_poisoned_out(q), min_split_tokens=16)
    torch.testing.assert_close(o.float(), o_ref.float(), **tol[torch.bfloat16])
    torch.testing.assert_close(lse, lse_ref, atol=1e-3, rtol=1e-4)


@pytest.mark.parametrize("dtype, num_splits", [(torch.float32, 1), (torch.bfloat16, 2)])
def test_kernel_reads_int8_cache(make_paged_kv, tol, dtype, num_splits, device):
    """--kv-cache-dtype int8: kernel and reference over an int8 pool (rows ending with their scale)
    equal the reference over the dequantized K/V; the NaN of unowned slots stays unread."""
    paged, q = _make_batch(make_paged_kv, SEQ_LENS, 8, 2, 32, 16, dtype, device)
    kv_int8 = quantize_kv(paged.kv_cache, torch.int8)[:, 1]  # NaN rows quantize to NaN scales
    dequantized = dequantize_kv(kv_int8)  # fp32: the kernel applies scales in fp32 too
    tables = (paged.block_tables, paged.seq_lens, 0.2)
    o_want, lse_want = paged_decode_attention_ref(q, dequantized, *tables)
    o_ref, lse_ref = paged_decode_attention_ref(q, kv_int8, *tables)
    o, lse = paged_decode_attention(
        q, kv_int8, *tables, num_splits=num_splits, out=_poisoned_out(q), min_split_tokens=16
    )
    assert not o.isnan().any() and not lse.isnan().any()
    torch.testing.assert_close(o_ref.float(), o_want.float(), **tol[dtype])
    torch.testing.assert_close(o.float(), o_want.float(), **tol[dtype])
    torch.testing.assert_close(lse, lse_want, atol=1e-3, rtol=1e-4)


def _new_kv_rows(paged, num_kv_heads, head_dim, dtype, device, seed=3):
    """A decode step's unrotated k, v for the new key of each seq (at seq_len - 1), their
    positions (not seq_len - 1: RoPE positions may differ, as after a context shift) and slots."""
    gen = torch.Generator().manual_seed(seed)
    num_seqs = paged.seq_lens.shape[0]
    k = torch.randn((num_seqs, num_kv_heads, head_dim), generator=gen).to(dtype).to(device)
    v = torch.randn((num_seqs, num_kv_heads, head_dim), generator=gen).to(dtype).to(device)
    angles = torch.rand((500, head_dim // 2), generator=gen) * 6.28
    cos_sin = torch.cat((angles.cos(), angles.sin()), dim=-1).to(device)
    positions = torch.randint(0, 500, (num_seqs,), generator=gen).to(device)
    block_size = paged.kv_layer.shape[2]
    slots = []
    for s, n in enumerate(paged.seq_lens.tolist()):
        block = int(paged.block_tables[s, (n - 1) // block_size]) if n else -1
        slots.append(block * block_size + (n - 1) % block_size if n else -1)
    slots = torch.tensor(slots, dtype=torch.int64, device=device)
    return NewKV(k, v, positions, cos_sin, slots)


@pytest.mark.parametrize(
    "dtype, num_heads, num_kv_heads, head_dim, num_splits, cache_dtype",
    [
        (torch.float32, 4, 2, 16, 1, None),
        (torch.float32, 8, 2, 32, 3, None),
        (torch.bfloat16, 8, 2, 32, 4, None),
        (torch.bfloat16, 6, 1, 64, None, None),
        (torch.bfloat16, 8, 2, 32, 2, torch.float8_e4m3fn),  # --kv-cache-dtype fp8: values saturate
    ],
)
def test_new_kv_equals_rope_store_then_attention(
    make_paged_kv, dtype, num_heads, num_kv_heads, head_dim, num_splits, cache_dtype, device
):
    """NewKV: the kernel rotates q and k and stores k, v itself; the cache, o and lse equal
    rope_and_store_kv followed by the kernel, to the bit, and q, k are left unrotated."""
    paged, q = _make_batch(make_paged_kv, SEQ_LENS, num_heads, num_kv_heads, head_dim, 16, dtype, device)
    new = _new_kv_rows(paged, num_kv_heads, head_dim, dtype, device)
    cache = paged.kv_cache if cache_dtype is None else paged.kv_cache.float().clamp(-448, 448).to(cache_dtype)
    tables = (paged.block_tables, paged.seq_lens, 0.2)
    kw = dict(num_splits=num_splits, min_split_tokens=16)

    cache_a, q_a, k_a = cache.clone(), q.clone(), new.k.clone()
    rope_and_store_kv(q_a, k_a, new.v, new.positions, new.cos_sin_cache, cache_a[:, 1], new.slot_mapping)
    o_a, lse_a = paged_decode_attention(q_a, cache_a[:, 1], *tables, **kw)

    cache_b, q_b, k_b = cache.clone(), q.clone(), new.k.clone()
    fused = NewKV(k_b, new.v, new.positions, new.cos_sin_cache, new.slot_mapping)
    o_b, lse_b = paged_decode_attention(q_b, cache_b[:, 1], *tables, **kw, out=_poisoned_out(q), new_kv=fused)

    assert torch.equal(q_b, q) and torch.equal(k_b, new.k), "q and k must stay unrotated"
    assert torch.equal(cache_b.view(torch.uint8), cache_a.view(torch.uint8)), (
        "cache differs from rope_store's"
    )
    assert not torch.equal(cache_b.view(torch.uint8), cache.view(torch.uint8))
    # On the CPU to the bit; on a GPU the attention's fp32 rounding may move a last bit (H200)
    torch.testing.assert_close(o_b, o_a, atol=2e-6 if q.is_cuda else 0, rtol=0)
    torch.testing.assert_close(lse_b, lse_a, atol=2e-6 if q.is_cuda else 0, rtol=0)
    cache_r = cache.clone()
    o_r, lse_r = paged_decode_attention_ref(q, cache_r[:, 1], *tables, new_kv=new)
    # the reference rounds fp32 to bf16 where Triton's interpreter truncates: a step apart at most
    tol = {torch.float32: dict(atol=3e-5, rtol=1e-5), torch.bfloat16: dict(atol=3e-2, rtol=2e-2)}[dtype]
    cache_tol = tol if cache_dtype is None else dict(atol=0.02, rtol=2.0**-3)  # may round to the next fp8
    torch.testing.assert_close(cache_r[:, 1].float(), cache_a[:, 1].float(), equal_nan=True, **cache_tol)
    torch.testing.assert_close(o_b.float(), o_r.float(), **tol)
    torch.testing.assert_close(lse_b, lse_r, **tol)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("seq_lens", [[750], [750, 2000, 9], [8192]])
def test_new_kv_engine_shapes_on_gpu(make_paged_kv, seq_lens):
    """The engine's shapes (32 / 8 heads of 128, 16-token blocks, automatic splits, bf16): the
    fused path stores the same bytes and its o, lse stay within a last fp32 bit of rope_store's."""
    paged, q = _make_batch(make_paged_kv, seq_lens, 32, 8, 128, 16, torch.bfloat16, "cuda")
    new = _new_kv_rows(paged, 8, 128, torch.bfloat16, "cuda")
    tables = (paged.block_tables, paged.seq_lens, 128**-0.5)
    cache_a, q_a, k_a = paged.kv_cache.clone(), q.clone(), new.k.clone()
    rope_and_store_kv(q_a, k_a, new.v, new.positions, new.cos_sin_cache, cache_a[:, 1], new.slot_mapping)
    o_a, lse_a = paged_decode_attention(q_a, cache_a[:, 1], *tables)
    cache_b = paged.kv_cache.clone()
    o_b, lse_b = paged_decode_attention(q, cache_b[:, 1], *tables, out=_poisoned_out(q), new_kv=new)
    assert torch.equal(cache_b.view(torch.uint8), cache_a.view(torch.uint8))
    # Scores a last fp32 bit apart may round a key's bf16 probability one step the other way: on an
    # H200 0.3% of o moved, at most 2.4e-4 (|o| ~ 0.01-0.1 here); a wrong key or row moves it by 1e-2+
    torch.testing.assert_close(o_b, o_a, atol=2.0**-11, rtol=2.0**-7)
    torch.testing.assert_close(lse_b, lse_a, atol=2e-6, rtol=0)

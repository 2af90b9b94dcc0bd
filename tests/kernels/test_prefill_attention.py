"""Paged prefill attention: reference vs dense float64 attention, kernel vs reference.

Seqs mix a whole prompt (no earlier KV), later chunks of a chunked prefill (earlier KV in the
cache), a single-token chunk and lengths that are not multiples of block_size.
"""

from __future__ import annotations

import pytest
import torch

from kvspill.kernels.kv_quant import dequantize_kv, quantize_kv
from kvspill.kernels.prefill_attention import (
    paged_prefill_attention,
    paged_prefill_attention_cpu,
    paged_prefill_attention_ref,
)

# (seq_len, q_len) per seq: whole prompt, later chunk, one-token chunk, chunk over one block.
SEQS = [(21, 21), (45, 13), (9, 1), (33, 17)]


def _make_batch(make_paged_kv, seqs, num_heads, num_kv_heads, head_dim, block_size, dtype, device, seed=0):
    paged = make_paged_kv([s for s, _ in seqs], num_kv_heads, head_dim, block_size, dtype, seed=seed)
    q_lens = [n for _, n in seqs]
    gen = torch.Generator().manual_seed(seed + 1)
    q = torch.randn((sum(q_lens), num_heads, head_dim), generator=gen).to(dtype).to(device)
    qsl = torch.tensor([0] + q_lens, dtype=torch.int32).cumsum(0, dtype=torch.int32).to(device)
    return paged, q, qsl


def _poisoned_out(q):
    o = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:2], float("nan"), dtype=torch.float32, device=q.device)
    return o, lse


@pytest.mark.parametrize("num_heads, num_kv_heads", [(4, 4), (8, 2), (6, 2), (8, 1)])
def test_reference_matches_dense_causal(make_paged_kv, dense_attention, num_heads, num_kv_heads, device):
    head_dim, block_size, scale = 32, 8, 0.3
    paged, q, qsl = _make_batch(
        make_paged_kv, SEQS, num_heads, num_kv_heads, head_dim, block_size, torch.float32, device
    )
    o, lse = paged_prefill_attention_ref(q, paged.kv_layer, paged.block_tables, qsl, paged.seq_lens, scale)
    for s, (_, q_len) in enumerate(SEQS):
        t0 = int(qsl[s])
        o_d, lse_d = dense_attention(q[t0 : t0 + q_len], paged.keys[s], paged.values[s], scale)
        torch.testing.assert_close(o[t0 : t0 + q_len].double(), o_d, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(lse[t0 : t0 + q_len].double(), lse_d, atol=1e-5, rtol=1e-5)


def test_reference_bf16_close_to_dense(make_paged_kv, dense_attention, device):
    paged, q, qsl = _make_batch(make_paged_kv, SEQS, 8, 2, 64, 16, torch.bfloat16, device)
    o, lse = paged_prefill_attention_ref(q, paged.kv_layer, paged.block_tables, qsl, paged.seq_lens, 0.125)
    assert o.dtype == torch.bfloat16 and lse.dtype == torch.float32
    o_d = torch.cat(
        [
            dense_attention(q[int(qsl[s]) : int(qsl[s + 1])], paged.keys[s], paged.values[s], 0.125)[0]
            for s in range(len(SEQS))
        ]
    )
    torch.testing.assert_close(o.double(), o_d, atol=2e-2, rtol=2e-2)


def test_reference_chunked_equals_whole_prompt(make_paged_kv, device):
    """Prefilling a prompt in two chunks gives the same rows as prefilling it at once."""
    paged, q, _ = _make_batch(make_paged_kv, [(40, 40)], 4, 2, 16, 8, torch.float32, device)
    whole = paged_prefill_attention_ref(
        q,
        paged.kv_layer,
        paged.block_tables,
        torch.tensor([0, 40], dtype=torch.int32, device=device),
        paged.seq_lens,
        0.25,
    )
    for cut in (1, 16, 27):
        first = paged_prefill_attention_ref(
            q[:cut],
            paged.kv_layer,
            paged.block_tables,
            torch.tensor([0, cut], dtype=torch.int32, device=device),
            torch.tensor([cut], dtype=torch.int32, device=device),
            0.25,
        )
        second = paged_prefill_attention_ref(
            q[cut:],
            paged.kv_layer,
            paged.block_tables,
            torch.tensor([0, 40 - cut], dtype=torch.int32, device=device),
            paged.seq_lens,
            0.25,
        )
        torch.testing.assert_close(torch.cat([first[0], second[0]]), whole[0])
        torch.testing.assert_close(torch.cat([first[1], second[1]]), whole[1])


@pytest.mark.parametrize(
    "dtype, num_heads, num_kv_heads, head_dim, block_size",
    [
        (torch.float32, 4, 2, 16, 8),
        (torch.float16, 8, 2, 32, 16),
        (torch.bfloat16, 8, 1, 64, 16),
        (torch.bfloat16, 6, 2, 32, 32),
        (torch.float32, 3, 3, 128, 16),
    ],
)
def test_kernel_matches_reference(
    make_paged_kv, tol, dtype, num_heads, num_kv_heads, head_dim, block_size, device
):
    paged, q, qsl = _make_batch(
        make_paged_kv, SEQS, num_heads, num_kv_heads, head_dim, block_size, dtype, device
    )
    args = (paged.kv_layer, paged.block_tables, qsl, paged.seq_lens, 0.2)
    o_ref, lse_ref = paged_prefill_attention_ref(q, *args)
    o, lse = paged_prefill_attention(q, *args, out=_poisoned_out(q))
    assert not o.isnan().any() and not lse.isnan().any(), "kernel left output rows unwritten"
    torch.testing.assert_close(o.float(), o_ref.float(), **tol[dtype])
    torch.testing.assert_close(lse, lse_ref, atol=1e-4, rtol=1e-5)


def test_kernel_strided_q_empty_chunk_and_out_o_only(make_paged_kv, tol, device):
    """q as a slice of a fused qkv output, a seq with no queries this step, `out` given as o."""
    seqs = [(30, 11), (12, 0), (25, 25)]
    num_heads, num_kv_heads, head_dim = 4, 2, 32
    paged = make_paged_kv([s for s, _ in seqs], num_kv_heads, head_dim, 8, torch.float16, seed=3)
    qkv = torch.randn(
        (36, num_heads + 2 * num_kv_heads, head_dim), generator=torch.Generator().manual_seed(4)
    )
    q = qkv.to(torch.float16).to(device)[:, :num_heads]
    qsl = torch.tensor([0, 11, 11, 36], dtype=torch.int32, device=device)
    args = (paged.kv_layer, paged.block_tables, qsl, paged.seq_lens, 0.17)
    o_ref, lse_ref = paged_prefill_attention_ref(q, *args)
    o_buf = torch.full((36, num_heads, head_dim), float("nan"), dtype=torch.float16, device=device)
    o, lse = paged_prefill_attention(q, *args, out=o_buf, max_query_len=25)
    assert o is o_buf and not o.isnan().any()
    torch.testing.assert_close(o, o_ref, **tol[torch.float16])
    torch.testing.assert_close(lse, lse_ref, atol=1e-4, rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    "num_heads, num_kv_heads, head_dim", [(32, 8, 64), (32, 8, 128), (12, 4, 128), (8, 2, 256)]
)
def test_kernel_real_tiles_on_gpu(make_paged_kv, tol, num_heads, num_kv_heads, head_dim):
    """GPU tile sizes (BLOCK_M 128, BLOCK_N 64) on chunks longer than one tile."""
    seqs = [(1500, 700), (700, 700), (333, 1), (2000, 1)]
    paged, q, qsl = _make_batch(
        make_paged_kv, seqs, num_heads, num_kv_heads, head_dim, 16, torch.bfloat16, "cuda"
    )
    args = (paged.kv_layer, paged.block_tables, qsl, paged.seq_lens, head_dim**-0.5)
    o_ref, lse_ref = paged_prefill_attention_ref(q, *args)
    o, lse = paged_prefill_attention(q, *args, out=_poisoned_out(q))
    torch.testing.assert_close(o.float(), o_ref.float(), **tol[torch.bfloat16])
    torch.testing.assert_close(lse, lse_ref, atol=1e-3, rtol=1e-4)


@pytest.mark.parametrize("fp8", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_kernel_reads_fp8_cache(make_paged_kv, tol, fp8, device):
    """--kv-cache-dtype fp8: the kernel widens the stored values as the reference does (.float())."""
    paged, q, qsl = _make_batch(make_paged_kv, SEQS, 4, 2, 32, 16, torch.bfloat16, device)
    kv_fp8 = paged.kv_layer.float().clamp(-448, 448).to(fp8)
    args = (kv_fp8, paged.block_tables, qsl, paged.seq_lens, 0.2)
    o_ref, lse_ref = paged_prefill_attention_ref(q, *args)
    o, lse = paged_prefill_attention(q, *args, out=_poisoned_out(q))
    torch.testing.assert_close(o.float(), o_ref.float(), **tol[torch.bfloat16])
    torch.testing.assert_close(lse, lse_ref, atol=1e-3, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernel_reads_int8_cache(make_paged_kv, tol, dtype, device):
    """--kv-cache-dtype int8: kernel and reference over an int8 pool equal the reference over the
    dequantized K/V (fp32: the kernel applies the row scales in fp32)."""
    paged, q, qsl = _make_batch(make_paged_kv, SEQS, 4, 2, 32, 16, dtype, device)
    kv_int8 = quantize_kv(paged.kv_cache, torch.int8)[:, 1]
    tables = (paged.block_tables, qsl, paged.seq_lens, 0.2)
    o_want, lse_want = paged_prefill_attention_ref(q, dequantize_kv(kv_int8), *tables)
    o_ref, _ = paged_prefill_attention_ref(q, kv_int8, *tables)
    o, lse = paged_prefill_attention(q, kv_int8, *tables, out=_poisoned_out(q))
    assert not o.isnan().any() and not lse.isnan().any()
    torch.testing.assert_close(o_ref.float(), o_want.float(), **tol[dtype])
    torch.testing.assert_close(o.float(), o_want.float(), **tol[dtype])
    torch.testing.assert_close(lse, lse_want, atol=1e-3, rtol=1e-4)


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.float8_e4m3fn]
)
@pytest.mark.parametrize("num_heads, num_kv_heads", [(4, 4), (6, 2)])
def test_cpu_path_equals_the_reference(make_paged_kv, num_heads, num_kv_heads, dtype):
    """The CPU engine's path (torch's CPU flash kernel, bottom-right causal mask) over whole
    prompts, later chunks, a one-token chunk and an empty one, GQA, every pool format."""
    seqs = [*SEQS, (12, 0)]
    q_dtype = dtype if dtype.is_floating_point and dtype.itemsize > 1 else torch.float32
    paged, q, qsl = _make_batch(make_paged_kv, seqs, num_heads, num_kv_heads, 32, 8, q_dtype, "cpu")
    kv = paged.kv_layer if dtype == q_dtype else quantize_kv(paged.kv_cache, dtype)[:, 1]
    tables = (paged.block_tables, qsl, paged.seq_lens, 0.3)
    o_ref, lse_ref = paged_prefill_attention_ref(q, kv, *tables)
    o, lse = paged_prefill_attention_cpu(q, kv, *tables, out=_poisoned_out(q))
    assert o.dtype == q.dtype and not o.isnan().any() and not lse.isnan().any()
    tol = {"atol": 1e-2, "rtol": 1e-2} if q_dtype.itemsize == 2 else {"atol": 1e-5, "rtol": 1e-5}
    torch.testing.assert_close(o.float(), o_ref.float(), **tol)
    torch.testing.assert_close(lse, lse_ref, atol=1e-4, rtol=1e-5)

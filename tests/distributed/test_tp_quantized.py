"""Tensor parallelism with quantized weights: fp8 (`--quantization fp8`) and AWQ / GPTQ int4
checkpoints split across ranks (model/fp8.py, model/int4_checkpoints.py, model/parallel.py).

The split is exact: a rank's shard holds precisely its slice of the weights one rank would hold
(fp8 values and per-row scales; Q4_1 blocks), which the first tests check without processes, one
rank at a time. The last one runs two gloo ranks end to end against one rank's greedy tokens.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from int4_writer import write_int4_checkpoint
from torch import nn

from kvspill.kernels.gguf_formats import dequantize_ref
from kvspill.llm import LLM
from kvspill.model import fp8 as fp8_weights
from kvspill.model import int4_checkpoints as int4
from kvspill.model.llama import LlamaForCausalLM
from kvspill.model.loader import _iter_safetensors, load_hf_config
from kvspill.model.parallel import TensorParallel, is_row_parallel
from kvspill.model.quant import QuantLinear
from kvspill.model.registry import architecture_of, get_model_class
from kvspill.model.resolve import resolve_model
from kvspill.sampling_params import SamplingParams

CPU = torch.device("cpu")
SIZE = 2


@pytest.fixture(scope="module")
def awq_dir(tiny_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = tmp_path_factory.mktemp("tp_awq") / "model"
    write_int4_checkpoint(tiny_llama_dir, dst, "awq", None, 32)
    return dst


@pytest.fixture(scope="module")
def gptq_dir(tiny_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = tmp_path_factory.mktemp("tp_gptq") / "model"
    write_int4_checkpoint(tiny_llama_dir, dst, "gptq", "gptq", 64)  # groups of 64 split in 32-blocks
    return dst


def _build(path: Path, fmt: str, tp: TensorParallel) -> LlamaForCausalLM:
    """load_model's steps for one rank, with no process group (loading runs no collective)."""
    config = load_hf_config(resolve_model(str(path)))
    spec = int4.parse_int4_config(config)
    with torch.device("meta"):
        model = get_model_class(architecture_of(config))(config, dtype=torch.float32, tp=tp)
        if fmt == "fp8":
            fp8_weights.install_fp8_modules(model, torch.float32)
        else:
            int4.install_int4_modules(model, torch.float32, spec)
    model.to_empty(device=CPU)
    model.init_buffers()
    if fmt == "fp8":
        fp8_weights.load_weights_fp8(model, _iter_safetensors(path))
    else:
        assert spec is not None
        int4.load_weights_int4(model, _iter_safetensors(path), spec, CPU)
    return model


def _dequantized(module: nn.Module) -> torch.Tensor:
    """The projection's weight [out, in] in float32, from its fp8 values or Q4_1 blocks."""
    if isinstance(module, fp8_weights.Fp8Linear):
        return module.dequantized(torch.float32)
    assert isinstance(module, QuantLinear) and len(module.parts) == 1
    return dequantize_ref(module.parts[0].data, "Q4_1", module.in_features, torch.float32)


def _projections(model: LlamaForCausalLM) -> dict[str, nn.Module]:
    kinds = (fp8_weights.Fp8Linear, QuantLinear)
    return {name: m for name, m in model.named_modules() if isinstance(m, kinds)}


@pytest.mark.parametrize("fmt", ["fp8", "awq", "gptq"])
def test_each_rank_holds_exactly_its_slice_of_the_quantized_weights(fmt, tiny_llama_dir, awq_dir, gptq_dir):
    path = {"fp8": tiny_llama_dir, "awq": awq_dir, "gptq": gptq_dir}[fmt]
    whole = _projections(_build(path, fmt, TensorParallel()))
    ranks = [_projections(_build(path, fmt, TensorParallel(rank=r, size=SIZE))) for r in range(SIZE)]
    assert len(whole) == 4 * 3  # qkv, o, gate_up, down in each of the 3 layers
    for name, module in whole.items():
        full = _dequantized(module)
        parts = [_dequantized(rank[name]) for rank in ranks]
        if is_row_parallel(f".{name.rpartition('.')[2]}."):  # o/down: input columns by rank
            assert torch.equal(torch.cat(parts, dim=1), full), name
            continue
        # q/k/v and gate/up: each fused shard's rows by rank (q_r, k_r, v_r on rank r)
        sizes = module.out_sizes
        for index, rows in enumerate(full.split(sizes)):
            pieces = [p.split([s // SIZE for s in sizes])[index] for p in parts]
            assert torch.equal(torch.cat(pieces), rows), f"{name} shard {index}"


def test_fp8_row_parallel_scales_are_whole_row_scales(tiny_llama_dir):
    """o/down rows are quantized whole, then split by columns: both ranks keep one rank's scales."""
    whole = _projections(_build(tiny_llama_dir, "fp8", TensorParallel()))
    rank1 = _projections(_build(tiny_llama_dir, "fp8", TensorParallel(rank=1, size=SIZE)))
    name = "model.layers.0.mlp.down_proj"
    assert torch.equal(rank1[name].weight_scale, whole[name].weight_scale)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["fp8", "awq"])
def test_two_ranks_with_quantized_weights_give_one_ranks_tokens(fmt, tiny_llama_dir, awq_dir):
    path = awq_dir if fmt == "awq" else tiny_llama_dir
    options = dict(device="cpu", dtype="float32", max_model_len=128, enable_prefix_caching=False)
    if fmt == "fp8":
        options["quantization"] = "fp8"
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    prompts = [[1, 17, 9, 30, 5, 8, 100, 3, 44, 12], [1, 200, 33, 4, 90, 91]]
    want = [o.token_ids for o in LLM(str(path), **options).generate(prompts, params)]
    two = LLM(str(path), **options, tensor_parallel_size=SIZE)
    try:
        assert [o.token_ids for o in two.generate(prompts, params)] == want
    finally:
        two.close()

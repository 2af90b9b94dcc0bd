"""Tensor parallelism on the CPU (gloo): two ranks give the tokens one rank gives.

Each model gets one two-rank engine (spawning a rank costs seconds) that runs several prompts at
once with most of their KV forced into the cpu tier: every rank spills its own heads' blocks,
so a rank whose tier held the wrong bytes, or whose shard of any weight were wrong, would change
the greedy tokens. The single-rank reference keeps all KV in its device tier.
"""

from __future__ import annotations

import os

import pytest
import torch

from kvspill.config import EngineConfig
from kvspill.errors import InvalidParameterError
from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams

NEW_TOKENS = 24
GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
BASE = dict(device="cpu", dtype="float32", block_size=8, max_model_len=256, enable_prefix_caching=False)
# 6 gpu blocks of 8 tokens for 3 prompts of up to 80 + 24 tokens: most of every sequence's KV
# lives in the cpu tier (tests/engine/test_tiers_e2e.py forces spills the same way).
SPILL = dict(
    num_kv_blocks=12, num_cpu_kv_blocks=60, num_sink_blocks=1, hot_window_tokens=8, max_num_batched_tokens=16
)


def _prompts(vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(3)
    return [torch.randint(3, vocab, (n,), generator=g).tolist() for n in (80, 41, 57)]


@pytest.mark.slow
@pytest.mark.parametrize("fixture", ["tiny_llama_dir", "tiny_qwen2_dir", "tiny_qwen3_dir"])
def test_two_ranks_with_cpu_spills_equal_one_rank(fixture, request):
    model_dir = request.getfixturevalue(fixture)
    one = LLM(str(model_dir), **BASE)
    prompts = _prompts(one.engine.vocab_size)
    want = [o.token_ids for o in one.generate(prompts, GREEDY)]
    two = LLM(str(model_dir), **BASE, **SPILL, tensor_parallel_size=2)
    try:
        got = [o.token_ids for o in two.generate(prompts, GREEDY)]
        stats = two.engine.kv_stats()
        # the same engine again: request state on the workers stays in step across requests
        again = two.generate([prompts[1]], GREEDY)[0].token_ids
    finally:
        two.close()
    assert got == want
    assert again == want[1]
    assert stats.max_cold_fraction > 0.5  # most of the KV was in the cpu tier
    assert stats.bytes_moved.get("gpu_to_cpu", 0) > 0
    # each rank's tiers hold its half of the KV heads: half the bytes per block
    assert stats.block_bytes * 2 == one.engine.kv_stats().block_bytes


@pytest.mark.slow
@pytest.mark.parametrize("kv_cache_dtype", ["fp8", "int8"])
def test_two_ranks_of_a_mixed_kv_pool_equal_one_rank(tiny_llama_dir, kv_cache_dtype):
    """--kv-cache-dtype-skip-layers on each rank's half of the KV heads (storage/layout.py), spilled."""
    mixed = dict(kv_cache_dtype=kv_cache_dtype, kv_cache_dtype_skip_layers=[1])
    one = LLM(str(tiny_llama_dir), **BASE, **mixed)
    prompts = _prompts(one.engine.vocab_size)
    want = [o.token_ids for o in one.generate(prompts, GREEDY)]
    two = LLM(str(tiny_llama_dir), **BASE, **SPILL, **mixed, tensor_parallel_size=2)
    try:
        got = [o.token_ids for o in two.generate(prompts, GREEDY)]
        stats = two.engine.kv_stats()
    finally:
        two.close()
    assert got == want
    assert stats.max_cold_fraction > 0.5 and stats.block_bytes * 2 == one.engine.kv_stats().block_bytes


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("KVSPILL_TEST_TP_SMOLLM2"),
    reason="3 ranks of SmolLM2 on 2 cores take minutes: set KVSPILL_TEST_TP_SMOLLM2=1 to run it",
)
@pytest.mark.parametrize("quantization", ["none", "gguf"])  # dequantized at load, or its Q4_1 blocks split
def test_smollm2_on_three_ranks_equals_one_rank(smollm2_gguf_path, quantization):
    # 9 heads and 3 KV heads split over 3 ranks only (not 2); its 49152-token vocabulary too.
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    prompts = ["The capital of France is", "def fib(n):"]
    base = dict(device="cpu", dtype="float32", max_model_len=256, quantization=quantization)
    want = [o.token_ids for o in LLM(None, **base).generate(prompts, params)]
    three = LLM(None, **base, tensor_parallel_size=3)
    try:
        assert [o.token_ids for o in three.generate(prompts, params)] == want
    finally:
        three.close()


def test_a_size_that_does_not_split_the_heads_is_refused_before_any_process_starts(smollm2_gguf_path):
    # SmolLM2-135M: 9 attention heads, 3 KV heads: 2 ranks cannot split them, 3 can.
    with pytest.raises(
        InvalidParameterError, match=r"9 attention heads, 3 KV heads.*Sizes that work: \[1, 3\]"
    ):
        LLM(None, device="cpu", tensor_parallel_size=2)


@pytest.mark.parametrize(
    "options, flag",
    [
        (dict(device="cuda:1"), "CUDA_VISIBLE_DEVICES"),
        (dict(attention="cpu"), "--attention"),
        (dict(cpu_offload_gb=1.0), "--cpu-offload-gb"),
        (dict(tensor_parallel_size=0), "from 1 to 64"),
    ],
)
def test_combinations_tensor_parallelism_does_not_run_are_refused(options, flag):
    options.setdefault("tensor_parallel_size", 2)
    with pytest.raises(InvalidParameterError, match=flag):
        EngineConfig(**options)


@pytest.mark.parametrize("qtype", ["Q4_1", "Q4_K", "Q8_0"])
def test_gguf_blocks_split_on_block_boundaries(qtype):
    """A rank's shard of quantized blocks dequantizes to its slice of the whole weight."""
    from kvspill.kernels.gguf_formats import check_supported, dequantize_ref, random_quantized
    from kvspill.model.parallel import TensorParallel, shard_weight

    fmt = check_supported(qtype)
    full = random_quantized(qtype, 8, 2 * 256, torch.Generator().manual_seed(0))
    want = dequantize_ref(full.data, qtype, full.in_features, torch.float32)  # [8, 512]
    block = (qtype, fmt.type_size)
    for r in range(2):
        tp = TensorParallel(rank=r, size=2)
        rows = shard_weight("model.layers.0.mlp.gate_proj.weight", full.data, tp, block)
        cols = shard_weight("model.layers.0.mlp.down_proj.weight", full.data, tp, block)
        assert torch.equal(dequantize_ref(rows, qtype, 512, torch.float32), want[4 * r : 4 * r + 4])
        assert torch.equal(dequantize_ref(cols, qtype, 256, torch.float32), want[:, 256 * r : 256 * r + 256])
    with pytest.raises(InvalidParameterError, match=f"{qtype} blocks per row, which do not split over 3"):
        shard_weight("model.layers.0.self_attn.o_proj.weight", full.data, TensorParallel(0, 3), block)


def test_the_flag_sets_the_config_and_plan_shows_one_rank():
    from kvspill.cli.plan_cmd import plan_json
    from kvspill.options import EngineOptions, engine_config

    assert engine_config(EngineOptions(tensor_parallel_size=2)).tensor_parallel_size == 2
    one, _, _ = plan_json("llama-8b", EngineOptions(vram_budget="80GiB", max_model_len="32K"))
    two, _, header = plan_json(
        "llama-8b", EngineOptions(vram_budget="80GiB", max_model_len="32K", tensor_parallel_size=2)
    )
    assert two["tensor_parallel_size"] == 2 and any("per rank" in line for line in header)
    w1, w2 = (p["plans"]["yours"]["weight_bytes"] for p in (one, two))
    kv1, kv2 = (p["plans"]["yours"]["kv_bytes_per_token"] for p in (one, two))
    assert kv2 * 2 == kv1  # 4 of the 8 KV heads per rank
    assert 0.49 < w2 / w1 < 0.51  # a rank's shard; the replicated norms are a rounding error

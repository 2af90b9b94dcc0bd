"""KV tiers end to end: with most of the KV in the cpu tier (or on disk), the engine's logits and
greedy tokens equal the all-on-one-tier run (fp32, CPU; the "gpu" tier is the CPU device here)."""

from __future__ import annotations

import pytest
import torch

from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams
from kvspill.storage.storage import KVLayout

NEW_TOKENS = 128
PROMPT_LEN = 300


def _llm(model_dir, tmp_path=None, **opts) -> LLM:
    base = dict(device="cpu", dtype="float32", block_size=8, max_model_len=512, enable_prefix_caching=False)
    base.update(opts)
    if tmp_path is not None:
        base["kv_disk_dir"] = str(tmp_path)
    return LLM(str(model_dir), **base)


@pytest.fixture(scope="module")
def reference(tiny_llama_dir, record_logits):
    prompt = torch.randint(3, 256, (PROMPT_LEN,), generator=torch.Generator().manual_seed(7)).tolist()
    llm = _llm(tiny_llama_dir, max_num_batched_tokens=16)
    logits = record_logits(llm)
    out = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True))[0]
    return prompt, out.token_ids, logits


def _cold_fraction_seen(llm: LLM) -> float:
    return llm.engine.kv_stats().max_cold_fraction


@pytest.mark.parametrize(
    "tiers",
    [
        dict(num_cpu_kv_blocks=60),  # nearly everything in the cpu tier
        dict(num_cpu_kv_blocks=4, num_disk_kv_blocks=60),  # most of it on disk
    ],
    ids=["cpu", "disk"],
)
def test_cold_tiers_give_the_same_logits_and_tokens(
    tiny_llama_dir, tmp_path, reference, tiers, record_logits
):
    prompt, want_tokens, want_logits = reference
    # 5 gpu blocks of 8 tokens hold the sink, an 8-token window and the blocks written per step;
    # the other 49 of the 54 blocks (prompt 300 + 128 new tokens) live in the cold tiers.
    llm = _llm(
        tiny_llama_dir,
        tmp_path,
        num_kv_blocks=5,
        max_num_batched_tokens=16,
        num_sink_blocks=1,
        hot_window_tokens=8,
        **tiers,
    )
    logits = record_logits(llm)
    out = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True))[0]
    assert out.token_ids == want_tokens
    assert len(logits) == len(want_logits)
    worst = max((a - b).abs().max().item() for a, b in zip(logits, want_logits, strict=True))
    assert worst < 1e-4
    assert _cold_fraction_seen(llm) >= 0.9
    assert llm.engine.kv_stats().total_bytes_moved > 0


def test_several_requests_spill_and_finish_like_alone(tiny_llama_dir, tmp_path):
    g = torch.Generator().manual_seed(11)
    prompts = [torch.randint(3, 256, (n,), generator=g).tolist() for n in (60, 90, 30)]
    params = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True)
    roomy = _llm(tiny_llama_dir, max_num_batched_tokens=32)
    want = [o.token_ids for o in roomy.generate(prompts, params)]
    tight = _llm(
        tiny_llama_dir,
        tmp_path,
        num_kv_blocks=12,
        max_num_batched_tokens=32,
        hot_window_tokens=8,
        num_cpu_kv_blocks=16,
        num_disk_kv_blocks=32,
    )
    got = [o.token_ids for o in tight.generate(prompts, params)]
    assert got == want
    stats = tight.engine.kv_stats().scheduler
    assert stats is not None and stats.kv_tiers.kv_block_moves["gpu->cpu"] > 0


def test_attention_cpu_mode_gives_the_same_tokens(tiny_llama_dir, reference):
    prompt, want_tokens, _ = reference
    llm = _llm(tiny_llama_dir, attention="cpu", max_num_batched_tokens=16)
    assert llm.engine.bundle.storage.device.type == "cpu"
    out = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True))[0]
    assert out.token_ids == want_tokens


def test_fp8_kv_cache_in_cold_tiers_equals_fp8_all_on_one_tier(tiny_llama_dir, tmp_path, record_logits):
    """--kv-cache-dtype fp8: the pools of every tier hold fp8 (a quarter of fp32's bytes); the cold
    path (the CPU kernel reading fp8 blocks in place) gives the logits of the all-on-one-tier run."""
    prompt = torch.randint(3, 256, (120,), generator=torch.Generator().manual_seed(5)).tolist()
    params = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    whole = _llm(tiny_llama_dir, kv_cache_dtype="fp8", max_num_batched_tokens=16)
    want_logits = record_logits(whole)
    want = whole.generate([prompt], params)[0].token_ids
    tiered = _llm(
        tiny_llama_dir,
        tmp_path,
        kv_cache_dtype="fp8",
        num_kv_blocks=5,
        max_num_batched_tokens=16,
        hot_window_tokens=8,
        num_cpu_kv_blocks=30,
    )
    storage = tiered.engine.bundle.storage
    assert storage.layout.dtype == storage.cpu_cache.dtype == torch.float8_e4m3fn
    fp32_layout = KVLayout(**{**vars(storage.layout), "dtype": torch.float32})
    assert storage.layout.bytes_per_token * 4 == fp32_layout.bytes_per_token
    logits = record_logits(tiered)
    assert tiered.generate([prompt], params)[0].token_ids == want
    # fp32 rounding that differs with the step's shapes can move a value across an fp8 rounding
    # boundary (one fp8 step, 6%): logits agree to 1e-3 here, not to fp32's 1e-4
    assert max((a - b).abs().max().item() for a, b in zip(logits, want_logits, strict=True)) < 5e-3
    assert _cold_fraction_seen(tiered) >= 0.7


@pytest.fixture(scope="module")
def int8_whole(tiny_llama_dir, record_logits):
    """--kv-cache-dtype int8 with all KV on one tier: the reference of the cold-tier int8 runs."""
    prompt = torch.randint(3, 256, (120,), generator=torch.Generator().manual_seed(5)).tolist()
    whole = _llm(tiny_llama_dir, kv_cache_dtype="int8", max_num_batched_tokens=16)
    logits = record_logits(whole)
    params = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    return prompt, params, whole.generate([prompt], params)[0].token_ids, logits


def test_int8_kv_cache_stays_close_to_fp32_kv(tiny_llama_dir, record_logits, int8_whole):
    """The int8 run (Hadamard basis, per-row scales) against fp32 KV: logits within the
    quantization's error while the greedy tokens agree (a wrong basis change or scale is off by
    the logits' whole range). The random tiny model has near-ties: the runs may part later."""
    prompt, params, want, int8_logits = int8_whole
    exact = _llm(tiny_llama_dir, max_num_batched_tokens=16)
    logits = record_logits(exact)
    got = exact.generate([prompt], params)[0].token_ids
    same = next(i for i, (a, b) in enumerate(zip([*got, -1], [*want, -2], strict=True)) if a != b)
    assert same >= 3, (got, want)
    spread = max(b.abs().max().item() for b in logits)
    for a, b in zip(int8_logits[: same + 1], logits[: same + 1], strict=True):  # + 1: the prefill's
        assert (a - b).abs().max().item() < 0.02 * spread


@pytest.mark.parametrize("cold_attention", ["cpu", "stream", "sparse"])  # sparse: budget > cold length
def test_int8_kv_cache_in_cold_tiers_equals_int8_all_on_one_tier(
    tiny_llama_dir, tmp_path, record_logits, int8_whole, cold_attention
):
    """--kv-cache-dtype int8: every tier holds int8 rows with their scales (bytes per token: 1 per
    value + 4 per row); the cold paths (the CPU kernel reading int8 blocks in place; the stream
    path staging them for the decode kernel) give the logits of the all-on-one-tier run, whose
    attention reads the same stored values dequantized."""
    prompt, params, want, want_logits = int8_whole
    tiered = _llm(
        tiny_llama_dir,
        tmp_path,
        kv_cache_dtype="int8",
        num_kv_blocks=5,
        max_num_batched_tokens=16,
        hot_window_tokens=8,
        num_cpu_kv_blocks=30,
        cold_attention=cold_attention,
    )
    storage = tiered.engine.bundle.storage
    layout = storage.layout
    assert layout.dtype == storage.cpu_cache.dtype == torch.int8
    assert storage.cpu_cache.shape[-1] == layout.head_dim + 4
    assert layout.bytes_per_token == layout.num_layers * 2 * layout.num_kv_heads * (layout.head_dim + 4)
    logits = record_logits(tiered)
    assert tiered.generate([prompt], params)[0].token_ids == want
    assert max((a - b).abs().max().item() for a, b in zip(logits, want_logits, strict=True)) < 1e-3
    assert _cold_fraction_seen(tiered) >= 0.7

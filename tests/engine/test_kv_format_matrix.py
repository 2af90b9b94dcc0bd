"""Every KV format with every cold path, over both cold tiers and the persist dir (tiny Llama,
fp32, CPU): a prompt run again after a restart is a full prefix hit and gives the same greedy
tokens. Each row once failed in a way no single-feature test saw (int8 rows through the disk
staging buffer; fp8 blocks and summaries through torch's CPU index_copy_, which has no float8)."""

from __future__ import annotations

import pytest
import torch

from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams

PARAMS = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)


@pytest.mark.parametrize("kv_cache_dtype", ["auto", "fp8", "int8"])
@pytest.mark.parametrize("cold_attention", ["cpu", "sparse"])
def test_a_persisted_prompt_over_cpu_and_disk_tiers_is_a_full_hit_with_the_same_tokens(
    tiny_llama_dir, tmp_path, kv_cache_dtype, cold_attention
):
    g = torch.Generator().manual_seed(3)
    prompt = torch.randint(3, 256, (131,), generator=g).tolist()
    options = dict(
        device="cpu", dtype="float32", block_size=8, max_model_len=512, max_num_batched_tokens=32,
        num_kv_blocks=6, num_sink_blocks=1, hot_window_tokens=8, num_cpu_kv_blocks=3,
        num_disk_kv_blocks=40, kv_disk_dir=str(tmp_path / "disk"), kv_persist_dir=str(tmp_path / "persist"),
        kv_cache_dtype=kv_cache_dtype, cold_attention=cold_attention, sparse_budget_tokens=4096,
    )  # fmt: skip
    first = LLM(str(tiny_llama_dir), **options)
    want = first.generate([prompt], PARAMS)[0].token_ids
    first.engine.close()
    second = LLM(str(tiny_llama_dir), **options)
    out = second.generate([prompt], PARAMS)[0]
    second.engine.close()
    assert out.token_ids == want
    assert out.num_cached_tokens == (len(prompt) - 1) // 8 * 8

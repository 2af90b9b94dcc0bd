"""`--cold-attention sparse` end to end on the tiny random Llama (fp32, CPU): with a budget above
every cold length the greedy tokens equal exact attention's; with a budget of two blocks the
engine runs and its counters show the decode rows reading fewer cold blocks than they had."""

from __future__ import annotations

import pytest
import torch
from tiered_llm import tiered_llm

from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams

NEW_TOKENS = 48
PROMPT_LEN = 200
GREEDY = SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True)


def _llm(model_dir, **opts) -> LLM:
    base = dict(device="cpu", dtype="float32", block_size=8, max_model_len=512, enable_prefix_caching=False)
    return LLM(str(model_dir), **(base | opts))


def _tiered(model_dir, **opts) -> LLM:
    return tiered_llm(model_dir, **opts)


@pytest.fixture(scope="module")
def prompt_and_exact(tiny_llama_dir):
    prompt = torch.randint(3, 256, (PROMPT_LEN,), generator=torch.Generator().manual_seed(3)).tolist()
    exact = _llm(tiny_llama_dir, max_num_batched_tokens=16).generate([prompt], GREEDY)[0].token_ids
    return prompt, exact


def test_sparse_with_a_large_budget_gives_the_exact_tokens(tiny_llama_dir, prompt_and_exact):
    prompt, exact = prompt_and_exact
    llm = _tiered(tiny_llama_dir, cold_attention="sparse", sparse_budget_tokens=4096)
    assert llm.generate([prompt], GREEDY)[0].token_ids == exact
    cold = llm.engine.kv_stats().runner.cold
    assert cold is not None and cold.sparse_cold_blocks > 0
    assert cold.sparse_selected_blocks == cold.sparse_cold_blocks


def test_sparse_with_a_small_budget_reads_fewer_blocks(tiny_llama_dir, prompt_and_exact):
    """Uncached, each decode row copies its 2 chosen blocks per layer every step; the block cache
    (the default) copies only the blocks its choice changed, and the tokens stay the same."""
    prompt, _ = prompt_and_exact
    uncached = _tiered(tiny_llama_dir, cold_attention="sparse", sparse_budget_tokens=16, sparse_cache_seqs=0)
    out = uncached.generate([prompt], GREEDY)[0].token_ids
    assert len(out) == NEW_TOKENS
    cold = uncached.engine.kv_stats().runner.cold
    assert cold is not None and cold.cpu_bytes > 0  # the prefill chunks stayed exact (cpu path)
    # every decode row reads 2 of its ~25-30 cold blocks per layer
    assert 0 < cold.sparse_selected_blocks * 10 < cold.sparse_cold_blocks
    layout = uncached.engine.bundle.storage.layout
    block_layer_bytes = layout.block_bytes // layout.num_layers
    assert cold.sparse_bytes == cold.sparse_selected_blocks * block_layer_bytes

    cached = _tiered(tiny_llama_dir, cold_attention="sparse", sparse_budget_tokens=16)
    assert cached.generate([prompt], GREEDY)[0].token_ids == out
    hot = cached.engine.kv_stats().runner.cold
    assert hot is not None and hot.sparse_selected_blocks == cold.sparse_selected_blocks
    assert 0 < hot.sparse_bytes < cold.sparse_bytes  # some chosen blocks were already there

"""Measure the activation peak of one prefill chunk on CUDA: an input to the memory plan.

Start-up runs one forward of `max_num_batched_tokens` tokens over a scratch KV pool after the
weights are loaded and before the real pool is sized; its peak beyond the weights and that pool
is what every later step may need on top of them (engine/setup.py passes it to the plan). It
ends with one prompt-logprobs slice of logits, the largest a step's output takes.
"""

from __future__ import annotations

import numpy as np
import torch

from kvspill.model.llama import LlamaForCausalLM
from kvspill.runner.attention import AttentionMetadata, PagedAttention
from kvspill.runner.prompt_logprobs import score_rows, slice_rows
from kvspill.storage.storage import KVLayout, KVStorage


def profile_prefill_peak(
    model: LlamaForCausalLM, layout: KVLayout, num_tokens: int, device: torch.device
) -> int:
    """Peak bytes one prefill chunk of `num_tokens` allocates beyond the weights (CUDA only)."""
    num_blocks = -(-num_tokens // layout.block_size) + 1
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    storage = KVStorage(layout, num_blocks, device)
    positions = np.arange(num_tokens, dtype=np.int64)
    block_table = torch.arange(num_blocks, dtype=torch.int32, device=device).view(1, -1)
    meta = AttentionMetadata(
        slot_mapping=torch.from_numpy(positions).to(device),
        num_decodes=0,
        decode_block_tables=block_table[:0],
        decode_seq_lens=torch.zeros(0, dtype=torch.int32, device=device),
        prefill_block_tables=block_table,
        prefill_query_start_loc=torch.tensor([0, num_tokens], dtype=torch.int32, device=device),
        prefill_seq_lens=torch.tensor([num_tokens], dtype=torch.int32, device=device),
        prefill_max_query_len=num_tokens,
    )
    with torch.inference_mode():
        ids = torch.zeros(num_tokens, dtype=torch.int64, device=device)
        hidden = model(ids, torch.from_numpy(positions).to(device), PagedAttention(storage, meta, 1.0))
        # a prompt-logprobs slice: its [rows, vocab] logits and logprobs (runner/prompt_logprobs.py)
        rows = min(slice_rows(model.lm_head, device), num_tokens)
        score_rows(model.compute_logits, hidden[-rows:])
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - before - storage.nbytes
    del storage, hidden
    torch.cuda.empty_cache()
    return max(peak, 0)

"""Measure the transients of the largest step on CUDA: an input to the memory plan.

Start-up runs the largest step the scheduler may build, after the weights are loaded and before
the real pool is sized: a forward of `max_num_batched_tokens` tokens over a scratch KV pool, the
logits of `max_num_seqs` sampled rows through the sampler with every option on (logit bias,
penalties, top-k/top-p/min-p, logprobs, a seeded draw), then one prompt-logprobs slice. Its peak
beyond the weights and that pool is what every later step may need on top of them
(engine/setup.py passes it to the plan, where it replaces the estimate). A GGUF projection past
the GEMV's rows dequantizes one slice at a time (kernels/quant_linear.py), so that is measured too.
"""

from __future__ import annotations

import numpy as np
import torch

from kvspill.model.llama import LlamaForCausalLM
from kvspill.runner.attention import AttentionMetadata, PagedAttention
from kvspill.runner.prompt_logprobs import score_rows, slice_rows
from kvspill.sampling.sampler import Sampler, SamplingState
from kvspill.sampling_params import SamplingParams
from kvspill.storage.storage import KVLayout, KVStorage

# The most logprobs a request may ask per token (OpenAI's top_logprobs bound).
_PROFILE_LOGPROBS = 20


def _worst_case_states(num_seqs: int, prompt: list[int], vocab: int) -> list[SamplingState]:
    """Rows that take every branch of the sampler at once."""
    params = SamplingParams(
        temperature=0.8, top_p=0.9, top_k=50, min_p=0.05, repetition_penalty=1.1,
        presence_penalty=0.5, frequency_penalty=0.5, logprobs=_PROFILE_LOGPROBS, seed=0,
        logit_bias=((0, 1.0), (vocab - 1, -1.0)),
    )  # fmt: skip
    return [SamplingState(params, prompt, output_token_ids=[1, 2, 3]) for _ in range(num_seqs)]


def _forward(
    model: LlamaForCausalLM, storage: KVStorage, num_tokens: int, device: torch.device
) -> torch.Tensor:
    """One prefill of `num_tokens` tokens into `storage` -> hidden [num_tokens, hidden]. The largest
    step may hold more tokens than one sequence's max_model_len (several sequences' chunks): the
    positions wrap at the RoPE table's length, which the rotary kernel reads unchecked on the GPU
    (positions past it were an illegal memory access at startup, e.g. --max-model-len 1024 with
    4096 batched tokens); the memory peak does not depend on their values."""
    num_blocks = storage.num_blocks
    slots = np.arange(num_tokens, dtype=np.int64)
    positions = slots % model.model.rotary_emb.max_positions
    block_table = torch.arange(num_blocks, dtype=torch.int32, device=device).view(1, -1)
    meta = AttentionMetadata(
        slot_mapping=torch.from_numpy(slots).to(device),
        num_decodes=0,
        decode_block_tables=block_table[:0],
        decode_seq_lens=torch.zeros(0, dtype=torch.int32, device=device),
        prefill_block_tables=block_table,
        prefill_query_start_loc=torch.tensor([0, num_tokens], dtype=torch.int32, device=device),
        prefill_seq_lens=torch.tensor([num_tokens], dtype=torch.int32, device=device),
        prefill_max_query_len=num_tokens,
    )
    ids = torch.zeros(num_tokens, dtype=torch.int64, device=device)
    return model(ids, torch.from_numpy(positions).to(device), PagedAttention(storage, meta, 1.0))


def profile_step_peak(
    model: LlamaForCausalLM, layout: KVLayout, num_tokens: int, num_seqs: int, device: torch.device
) -> int:
    """Peak bytes the largest step (`num_tokens` tokens, `num_seqs` rows sampled) allocates beyond
    the weights (CUDA only)."""
    num_blocks = -(-num_tokens // layout.block_size) + 1
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    storage = KVStorage(layout, num_blocks, device)
    with torch.inference_mode():
        hidden = _forward(model, storage, num_tokens, device)
        rows = min(num_seqs, num_tokens)
        logits = model.compute_logits(hidden[-rows:])
        vocab = logits.shape[-1]
        states = _worst_case_states(rows, [i % vocab for i in range(min(num_tokens, 4096))], vocab)
        Sampler().sample(logits, states)
        del logits
        # a prompt-logprobs slice: its [rows, vocab] logits and logprobs (runner/prompt_logprobs.py)
        score_rows(model.compute_logits, hidden[-min(slice_rows(model.lm_head, device), num_tokens) :])
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - before - storage.nbytes
    del storage, hidden
    torch.cuda.empty_cache()
    return max(peak, 0)

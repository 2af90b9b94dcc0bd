"""Token sampling for a batch of sequences: penalties, min_tokens, logprobs, truncation, draw.

The model runner calls `Sampler.sample(logits, states, generator)` once per step with one row
of logits per sequence that reached the end of its known tokens; `generator` (the engine-level
one, on the logits' device) draws for unseeded rows. The pipeline (vLLM's order):

0. logit_bias (OpenAI: added to the raw logits), vLLM's allowed_token_ids and bad_words
   (`token_bans.py`: the rest, or the word's last token, -inf), then the grammar mask of guided rows
   (`kvspill/guided/bitmask.py`: forbidden tokens -inf), so every later step, greedy or random,
   only ever sees allowed tokens;
1. penalties: repetition (multiplicative, HF semantics, over prompt + output tokens), then
   frequency and presence (OpenAI additive semantics, over output tokens only);
2. min_tokens: eos (unless `ignore_eos`) and `stop_token_ids` set to -inf while
   `len(output_token_ids) < min_tokens`;
3. logprobs, when requested, are `log_softmax` of the logits after steps 1-2 and BEFORE
   temperature, top-k, top-p and min-p ("penalized" logprobs: they describe the model's
   distribution as the penalties shape it, independent of how it is then truncated or sharpened);
4. greedy rows (temperature 0): argmax, ties to the lowest token id;
5. random rows: temperature, top-k, top-p (renormalized over the top-k survivors), min-p
   (relative to the most likely surviving token), then the exponential race
   `argmax(probs / E)`, `E ~ Exponential(1)` i.i.d. per token, which samples from `probs`.

Invariants:
- The input logits are never modified.
- Every step is row-wise: a row's result depends only on its own logits, its state and (for
  seeded rows) its own generator, so a seeded request yields the same tokens whether it runs
  alone or in any batch. Disabled truncations (top_k 0/-1, top_p 1, min_p 0) are exact no-ops.
- A seeded random row draws exactly one noise vector of `vocab` values per sampled token from
  its own generator. A state created with earlier outputs (a resumed request, its generator
  freshly seeded) first replays the draws those tokens used, so preemption does not change a
  seeded request's tokens.
- `sample()` does not append to `output_token_ids`: the runner appends the returned tokens.
- When every row is greedy without penalties, logprobs or active min_tokens, the whole batch is
  one argmax (no per-row tensor work).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

import torch

from kvspill.guided.bitmask import GuideState, guided_mask_logits, to_device
from kvspill.kernels.greedy_argmax import widen_and_argmax
from kvspill.sampling.token_bans import apply_token_bans
from kvspill.sampling_params import SamplingParams
from kvspill.types import TokenLogprobs

_NEG_INF = float("-inf")


@dataclass
class SamplingState:
    """Per-request sampling state held by the runner for the request's lifetime.

    `output_token_ids` is the runner's list of generated tokens (it appends after each step);
    penalties and min_tokens read it. A request with `params.seed` gets its own `generator`:
    pass one (on the logits' device, freshly seeded), or leave it None and the sampler creates
    it on the logits' device at the first draw with `manual_seed(params.seed)`.
    """

    params: SamplingParams
    prompt_token_ids: list[int]
    output_token_ids: list[int] = field(default_factory=list)
    eos_token_ids: Collection[int] = ()
    generator: torch.Generator | None = None
    guide: GuideState | None = None  # the grammar matcher of a guided request (params.guided)
    # Noise vectors drawn from `generator` so far (see the module invariants).
    num_draws: int = field(init=False, default=0)
    # The prompt ids as a tensor on the logits' device, built once for repetition penalty.
    _prompt_ids_tensor: torch.Tensor | None = field(init=False, default=None, repr=False)

    @property
    def min_tokens_active(self) -> bool:
        return len(self.output_token_ids) < self.params.min_tokens

    @property
    def plain_greedy(self) -> bool:
        """Greedy with nothing else to do: eligible for the batch-argmax fast path."""
        p = self.params
        return (
            p.greedy and not p.needs_logits_processing and p.logprobs is None and not self.min_tokens_active
        )

    def prompt_ids_tensor(self, device: torch.device) -> torch.Tensor:
        t = self._prompt_ids_tensor
        if t is None or t.device != device:
            t = torch.tensor(self.prompt_token_ids, dtype=torch.long, device=device)
            self._prompt_ids_tensor = t
        return t


@dataclass(frozen=True)
class SamplerOutput:
    """One sampled token per row, and its logprobs where the request asked for them."""

    token_ids: list[int]  # [num_seqs]
    logprobs: list[TokenLogprobs | None]  # [num_seqs]; None where params.logprobs is None


def _padded_ids(rows: list[list[int]], pad: int, device: torch.device) -> torch.Tensor:
    """[num_rows, max_len] long tensor of the id lists, right-padded with `pad`."""
    max_len = max((len(r) for r in rows), default=0)
    data = [r + [pad] * (max_len - len(r)) for r in rows]
    return torch.tensor(data, dtype=torch.long, device=device).view(len(rows), max_len)


def apply_penalties(logits: torch.Tensor, states: list[SamplingState]) -> torch.Tensor:
    """Repetition, then frequency and presence penalties, for the rows that ask for them.

    logits: [num_seqs, vocab] float32 (not modified). Returns a new tensor, or `logits` itself
    when no row has penalties. Token ids >= vocab are ignored (as HF does).
    """
    rows = [i for i, s in enumerate(states) if s.params.needs_penalties]
    if not rows:
        return logits
    vocab = logits.shape[1]
    device = logits.device
    sub = [states[i] for i in rows]
    row_idx = torch.tensor(rows, dtype=torch.long, device=device)
    x = logits.index_select(0, row_idx)  # [num_pen, vocab]

    # Output-token counts; column `vocab` absorbs padding and out-of-range ids.
    out_ids = _padded_ids([s.output_token_ids for s in sub], vocab, device).clamp_(max=vocab)
    counts = torch.zeros(len(rows), vocab + 1, dtype=logits.dtype, device=device)
    counts.scatter_add_(1, out_ids, torch.ones_like(out_ids, dtype=logits.dtype))
    counts = counts[:, :vocab]  # [num_pen, vocab]

    rep = [s.params.repetition_penalty for s in sub]
    if any(r != 1.0 for r in rep):
        seen = torch.zeros(len(rows), vocab + 1, dtype=torch.bool, device=device)
        no_ids = torch.empty(0, dtype=torch.long, device=device)
        prompts = [s.prompt_ids_tensor(device) if r != 1.0 else no_ids for s, r in zip(sub, rep, strict=True)]
        lengths = torch.tensor([len(t) for t in prompts], dtype=torch.long, device=device)
        prompt_rows = torch.repeat_interleave(torch.arange(len(rows), device=device), lengths)
        seen[prompt_rows, torch.cat(prompts).clamp(max=vocab)] = True
        seen = seen[:, :vocab] | (counts > 0)
        penalty = torch.tensor(rep, dtype=logits.dtype, device=device).unsqueeze(1)  # [num_pen, 1]
        # HF RepetitionPenaltyLogitsProcessor: negative logits are multiplied, others divided.
        penalized = torch.where(x < 0, x * penalty, x / penalty)
        x = torch.where(seen, penalized, x)

    freq = [s.params.frequency_penalty for s in sub]
    pres = [s.params.presence_penalty for s in sub]
    if any(f != 0.0 for f in freq):
        x = x - torch.tensor(freq, dtype=logits.dtype, device=device).unsqueeze(1) * counts
    if any(p != 0.0 for p in pres):
        present = (counts > 0).to(logits.dtype)
        x = x - torch.tensor(pres, dtype=logits.dtype, device=device).unsqueeze(1) * present

    out = logits.clone()
    out.index_copy_(0, row_idx, x)
    return out


def apply_logit_bias(logits: torch.Tensor, states: list[SamplingState]) -> torch.Tensor:
    """Add each row's logit_bias to its logits (OpenAI semantics). Returns a new tensor, or
    `logits` when no row has a bias. Ids >= vocab are refused at add_request."""
    rows, toks, biases = [], [], []
    for i, s in enumerate(states):
        for token, bias in s.params.logit_bias:
            rows.append(i)
            toks.append(token)
            biases.append(bias)
    if not rows:
        return logits
    device = logits.device
    idx = (to_device(rows, torch.long, device), to_device(toks, torch.long, device))
    return logits.index_put(idx, to_device(biases, logits.dtype, device), accumulate=True)


def apply_min_tokens(logits: torch.Tensor, states: list[SamplingState]) -> torch.Tensor:
    """Mask eos (unless ignore_eos) and stop_token_ids to -inf while output < min_tokens.

    logits: [num_seqs, vocab] (not modified). Returns a new tensor, or `logits` when no row
    is affected.
    """
    vocab = logits.shape[1]
    row_list: list[int] = []
    tok_list: list[int] = []
    for i, s in enumerate(states):
        if not s.min_tokens_active:
            continue
        banned = set(s.params.stop_token_ids)
        if not s.params.ignore_eos:
            banned.update(s.eos_token_ids)
        for t in banned:
            if t < vocab:
                row_list.append(i)
                tok_list.append(t)
    if not row_list:
        return logits
    out = logits.clone()
    idx = (
        torch.tensor(row_list, dtype=torch.long, device=logits.device),
        torch.tensor(tok_list, dtype=torch.long, device=logits.device),
    )
    out.index_put_(idx, torch.tensor(_NEG_INF, dtype=logits.dtype, device=logits.device))
    return out


def apply_top_k_top_p(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Mask to -inf everything outside each row's top-k, then outside its top-p nucleus.

    logits: [num_rows, vocab]; top_k: [num_rows] long, in [1, vocab] (vocab = off);
    top_p: [num_rows] float in (0, 1] (1 = off). Top-k keeps exactly k tokens, ties going to the
    lower id (stable sort). Top-p keeps the smallest prefix of the top-k survivors, most likely
    first, whose renormalized mass reaches p. Returns a new tensor.
    """
    num_rows, vocab = logits.shape
    sorted_logits, sorted_idx = logits.sort(dim=-1, descending=True, stable=True)  # [num_rows, vocab]
    pos = torch.arange(vocab, device=logits.device)
    remove = pos.unsqueeze(0) >= top_k.unsqueeze(1)  # [num_rows, vocab], sorted order
    if bool((top_p < 1.0).any()):
        probs = sorted_logits.masked_fill(remove, _NEG_INF).softmax(dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs  # exactly 0 at position 0: the top token stays
        p = top_p.unsqueeze(1)
        remove |= (mass_before >= p) & (p < 1.0)
    mask = torch.empty_like(remove).scatter_(1, sorted_idx, remove)
    return logits.masked_fill(mask, _NEG_INF)


def apply_min_p(probs: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """Zero the probabilities below `min_p` times the row's largest one.

    probs: [num_rows, vocab]; min_p: [num_rows] float in [0, 1] (0 = off). Returns a new tensor.
    """
    threshold = min_p.unsqueeze(1) * probs.amax(dim=-1, keepdim=True)  # [num_rows, 1]
    return probs.masked_fill(probs < threshold, 0.0)


class Sampler:
    """Samples one token per row. Stateless apart from the engine-level generator.

    The engine-level generator draws the noise of unseeded random rows and must live on the
    logits' device: the one given to `sample()`, else the one given here, else torch's default
    generator for that device.
    """

    def __init__(self, generator: torch.Generator | None = None) -> None:
        self.generator = generator

    def sample(
        self,
        logits: torch.Tensor,
        states: list[SamplingState],
        generator: torch.Generator | None = None,
    ) -> SamplerOutput:
        """logits: [num_seqs, vocab] float32, row i belongs to states[i]."""
        token_ids, logprobs = self.sample_tensor(logits, states, generator)
        return SamplerOutput(token_ids.tolist(), logprobs)

    def sample_tensor(
        self,
        logits: torch.Tensor,
        states: list[SamplingState],
        generator: torch.Generator | None = None,
        greedy_ids: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, list[TokenLogprobs | None]]:
        """`sample` that leaves the token ids on the logits' device ([num_seqs] long) when no row
        asks for logprobs, so the caller decides when to wait for them. `greedy_ids`: the rows'
        argmax when the caller already has it (a CUDA graph computes it beside the logits)."""
        assert logits.dim() == 2 and logits.shape[0] == len(states), (tuple(logits.shape), len(states))
        assert logits.dtype == torch.float32, logits.dtype
        if all(s.plain_greedy for s in states):
            return (greedy_ids if greedy_ids is not None else greedy_argmax(logits)), [None] * len(states)
        generator = generator if generator is not None else self.generator

        outputs = [s.output_token_ids for s in states]
        logits = apply_token_bans(apply_logit_bias(logits, states), [s.params for s in states], outputs)
        logits = guided_mask_logits(logits, [s.guide for s in states], outputs)
        logits = apply_min_tokens(apply_penalties(logits, states), states)
        lp_rows = [i for i, s in enumerate(states) if s.params.logprobs is not None]
        logprobs_all = None
        if lp_rows:
            lp_idx = torch.tensor(lp_rows, dtype=torch.long, device=logits.device)
            logprobs_all = logits.index_select(0, lp_idx).log_softmax(dim=-1)  # [num_lp, vocab]

        token_ids = greedy_argmax(logits)  # [num_seqs]: final for greedy rows
        random_rows = [i for i, s in enumerate(states) if not s.params.greedy]
        if random_rows:
            rand_idx = torch.tensor(random_rows, dtype=torch.long, device=logits.device)
            rand_states = [states[i] for i in random_rows]
            sampled = _sample_random(logits.index_select(0, rand_idx), rand_states, generator)
            token_ids.index_copy_(0, rand_idx, sampled)

        logprobs: list[TokenLogprobs | None] = [None] * len(states)
        if logprobs_all is not None:
            _fill_logprobs(logprobs_all, lp_rows, token_ids, states, logprobs, token_ids.tolist())
        return token_ids, logprobs


def greedy_argmax(logits: torch.Tensor) -> torch.Tensor:
    """argmax over the last dim of [num_rows, vocab], ties to the lowest id: [num_rows] long. On
    CUDA one launch of `kernels/greedy_argmax` (torch's argmax of one 128K-logit row runs on one
    block: 26 us on an H100); fp32 logits are not copied."""
    return widen_and_greedy(logits)[1]


def widen_and_greedy(
    logits: torch.Tensor, counters: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits as fp32, their greedy argmax): a step's last work on the lm_head's output, one
    kernel on CUDA (`kernels/greedy_argmax.widen_and_argmax`, `counters` its arrival counters)."""
    if logits.is_cuda:
        return widen_and_argmax(logits.contiguous(), counters)
    wide = logits.float()
    return wide, wide.argmax(dim=-1)


def _fill_logprobs(
    logprobs_all: torch.Tensor,
    lp_rows: list[int],
    token_ids: torch.Tensor,
    states: list[SamplingState],
    out: list[TokenLogprobs | None],
    token_list: list[int],
) -> None:
    """logprobs_all: [num_lp, vocab] log_softmax of rows `lp_rows`. Fills `out` in place."""
    device = logprobs_all.device
    lp_idx = torch.tensor(lp_rows, dtype=torch.long, device=device)
    chosen = token_ids.index_select(0, lp_idx).unsqueeze(1)  # [num_lp, 1]
    chosen_lp: list[float] = logprobs_all.gather(1, chosen).squeeze(1).tolist()
    ks = [states[i].params.logprobs or 0 for i in lp_rows]
    max_k = max(ks)
    top_vals: list[list[float]] = [[] for _ in lp_rows]
    top_ids: list[list[int]] = [[] for _ in lp_rows]
    if max_k > 0:
        vals, ids = logprobs_all.topk(max_k, dim=-1)  # [num_lp, max_k], best first
        top_vals, top_ids = vals.tolist(), ids.tolist()
    for j, i in enumerate(lp_rows):
        k = ks[j]
        top = list(zip(top_ids[j][:k], top_vals[j][:k], strict=True))
        out[i] = TokenLogprobs(token_id=token_list[i], logprob=chosen_lp[j], top=top)


def _sample_random(
    logits: torch.Tensor, states: list[SamplingState], generator: torch.Generator | None
) -> torch.Tensor:
    """logits: [num_rand, vocab] of non-greedy rows. Returns [num_rand] long token ids."""
    vocab = logits.shape[1]
    device = logits.device
    params = [s.params for s in states]
    temps = torch.tensor([p.temperature for p in params], dtype=logits.dtype, device=device)
    logits = logits / temps.unsqueeze(1)

    top_k = [p.top_k if 0 < p.top_k < vocab else vocab for p in params]
    top_p = [p.top_p for p in params]
    if any(k < vocab for k in top_k) or any(p < 1.0 for p in top_p):
        logits = apply_top_k_top_p(
            logits,
            torch.tensor(top_k, dtype=torch.long, device=device),
            torch.tensor(top_p, dtype=logits.dtype, device=device),
        )
    probs = logits.softmax(dim=-1)  # [num_rand, vocab]
    min_p = [p.min_p for p in params]
    if any(m > 0.0 for m in min_p):
        probs = apply_min_p(probs, torch.tensor(min_p, dtype=probs.dtype, device=device))

    noise = torch.empty_like(probs)
    if any(s.params.seed is None for s in states):
        noise.exponential_(generator=generator)
    for j, s in enumerate(states):
        if s.params.seed is not None:
            noise[j] = _next_noise(s, vocab, probs.dtype, device)
    # An Exponential(1) draw can round to 0; the clamp keeps 0-probability tokens at 0.
    noise.clamp_(min=torch.finfo(probs.dtype).tiny)
    return (probs / noise).argmax(dim=-1)


def _next_noise(state: SamplingState, vocab: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The seeded row's next Exponential(1) noise vector: [vocab].

    Drawn into a fresh tensor so the values do not depend on the row's place in the batch;
    first replays the draws of outputs generated before this state existed (resumed request).
    """
    if state.generator is None:
        assert state.params.seed is not None
        state.generator = torch.Generator(device=device)
        state.generator.manual_seed(state.params.seed)
    noise = torch.empty(vocab, dtype=dtype, device=device)
    while state.num_draws < len(state.output_token_ids):
        noise.exponential_(generator=state.generator)
        state.num_draws += 1
    noise.exponential_(generator=state.generator)
    state.num_draws += 1
    return noise

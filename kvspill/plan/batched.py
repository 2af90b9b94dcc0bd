"""Decode of several sequences at once: the tokens a step of N sequences gives in all.

A step of N sequences that all decode reads every weight once for the N tokens, and each
sequence's KV: N x context tokens over HBM where the GPU tier holds them all. The weights' rate at
N tokens is the kernel's (`plan/weights.multi_token_read_gbs`: Q4_K_M's tensor-core kernel, bound
by its instructions, fit to H200 rows), capped by HBM; the per-layer step overhead and the
collectives are the one-sequence step's (one step, whatever its batch). On an H200 the fit is
within 1.3% of the engine's 1 / 4 / 8 / 16 / 32 x 2K rows (tests/plan/test_batched.py).

Predicted only where every sequence is on the GPU tier and the rate at N tokens is known: a plan
of spilled sequences or of an unmeasured kernel says nothing rather than a guess. No torch, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvspill.plan.arithmetic import MemoryPlan
from kvspill.plan.bandwidths import GB
from kvspill.plan.costs import STEP_OVERHEAD_PER_LAYER_S, collectives_s, gpu_kv_decode_cost
from kvspill.plan.weights import multi_token_read_gbs


@dataclass(frozen=True)
class BatchedDecode:
    """One decode step of `num_seqs` sequences of `context_len` tokens, seconds per part."""

    num_seqs: int
    context_len: int
    weights_s: float  # every weight read once for the step's tokens
    gpu_kv_s: float  # all sequences' KV over HBM
    overhead_s: float  # launches and host work (as one sequence's step), collectives included

    @property
    def step_s(self) -> float:
        return self.weights_s + self.gpu_kv_s + self.overhead_s

    @property
    def tok_s(self) -> float:
        """Tokens a second, all sequences together."""
        return self.num_seqs / self.step_s


def batched_decode(plan: MemoryPlan, num_seqs: int, context_len: int | None = None) -> BatchedDecode | None:
    """The step of `num_seqs` sequences of `context_len` (the plan's context when None) decoding
    together, or None where it is not predicted (module docstring): the sequences need more
    than the GPU tier, weights are offloaded, the cold attention is sparse (its steps are planned
    for one sequence), the engine runs on the CPU, or the weights' kernel at that many tokens is
    not measured."""
    r = plan.request
    ctx = plan.context_len if context_len is None else context_len
    spilled = (
        num_seqs * ctx > plan.gpu_kv_tokens or plan.offloaded_weight_bytes or r.cold_attention == "sparse"
    )
    if num_seqs < 1 or r.device != "cuda" or spilled:
        return None
    known, rate = multi_token_read_gbs(r.spec, r.quantization, num_seqs, r.scale_pair_bytes > 0)
    if not known:
        return None
    hbm = plan.bandwidths.hbm_gbs or 1.0
    read_per_token, turns_s = gpu_kv_decode_cost(
        r.kv_format, True, plan.kv_bytes_per_token, r.spec.kv_bytes_per_token(2, 0), r.spec.num_layers
    )
    layers = r.spec.num_layers
    return BatchedDecode(
        num_seqs=num_seqs,
        context_len=ctx,
        weights_s=r.weight_read_bytes / (min(hbm, rate or hbm) * GB),
        gpu_kv_s=num_seqs * ctx * read_per_token / (hbm * GB),
        overhead_s=layers * STEP_OVERHEAD_PER_LAYER_S
        + num_seqs * turns_s
        + collectives_s(layers, r.tensor_parallel_size),
    )


def max_seqs_decode(plan: MemoryPlan) -> BatchedDecode | None:
    """`batched_decode` of as many sequences of the plan's context as --max-num-seqs allows and fit
    at once (what `kvspill plan` reports); None where that is one sequence or not predicted."""
    seqs = min(plan.request.max_num_seqs, plan.max_concurrent_seqs)
    return batched_decode(plan, seqs) if plan.fits and seqs > 1 else None

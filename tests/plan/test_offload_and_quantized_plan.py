"""The planner's weight placement: GGUF types kept quantized, and whole layers offloaded to RAM."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvspill.errors import InvalidParameterError
from kvspill.model.offload import choose_layers
from kvspill.plan import DEFAULT_BANDWIDTHS, KNOWN_GPU_BANDWIDTHS, PlanRequest, make_plan
from kvspill.plan.spec import KNOWN_SHAPES
from kvspill.plan.weights import QUANT_READ_GBS_GENERIC, weight_read_gbs

GiB = 2**30
SPEC = KNOWN_SHAPES["llama-8b"]


def _plan(**changes):
    base = dict(spec=SPEC, vram_budget_bytes=12 * GiB, context_len=8192, gpu_memory_utilization=1.0)
    return make_plan(PlanRequest(**{**base, **changes}), DEFAULT_BANDWIDTHS)


def test_offload_takes_whole_layers_like_the_loader():
    layer = SPEC.layer_params * 2
    assert choose_layers([layer] * 32, 0) == 0
    assert choose_layers([layer] * 32, 1) == 1
    assert choose_layers([layer] * 32, 3 * layer) == 3
    assert choose_layers([layer] * 32, 3 * layer + 1) == 4
    assert choose_layers([layer] * 4, 100 * layer) == 4
    plan = _plan(cpu_offload_bytes=3 * layer + 1)
    assert plan.request.offloaded_layers == 4
    assert plan.offloaded_weight_bytes == 4 * layer
    # resident layers plus two staging slots of one layer
    assert plan.weight_bytes == SPEC.weight_bytes(2) - 4 * layer + 2 * layer


def test_offloaded_weights_cost_pcie_time_every_step():
    resident = _plan(vram_budget_bytes=40 * GiB)
    offloaded = _plan(vram_budget_bytes=40 * GiB, cpu_offload_bytes=6 * GiB)
    moved = offloaded.offloaded_weight_bytes
    assert offloaded.decode.offload_s == pytest.approx(moved / (DEFAULT_BANDWIDTHS.h2d_gbs * 1e9))
    assert offloaded.decode_tok_s < resident.decode_tok_s


def test_advice_names_the_offload_and_the_quantized_file_that_fit():
    plan = _plan()  # 15 GiB of bf16 weights in 12 GiB
    assert not plan.fits
    advice = "\n".join(plan.advice)
    assert "--cpu-offload-gb" in advice and "GGUF file" in advice
    gib = float(advice.split("--cpu-offload-gb ")[1].split(":")[0])
    assert _plan(cpu_offload_bytes=int(gib * GiB)).fits


def test_gguf_types_give_their_bits_per_weight():
    assert _plan(quantization="q4_k").request.weight_read_bytes == pytest.approx(
        SPEC.num_params * 4.5 / 8, abs=1
    )
    gathered = (
        0 if SPEC.tie_word_embeddings else SPEC.vocab_size * SPEC.hidden_size
    )  # the embedding: no pairs
    assert _plan(quantization="q4_k").request.scale_pair_bytes == pytest.approx(
        (SPEC.num_params - gathered) / 8, rel=1e-6
    )
    assert _plan(quantization="q4_k", max_num_seqs=1).weight_bytes == pytest.approx(
        SPEC.num_params * 4.5 / 8, abs=1
    )
    assert _plan(quantization="q8_0").weight_bytes == pytest.approx(SPEC.num_params * 8.5 / 8, abs=1)
    assert _plan(quantization="q4_k_m").fits
    with pytest.raises(InvalidParameterError, match="--quantization must be one of"):
        _plan(quantization="int3")


def _8k_tok_s(quantization: str, card: str, hbm_gbs: float) -> float:
    """The plan's tok/s of random llama-8b at 8K in 16 GiB on `card` with its measured copy rate."""
    request = PlanRequest(
        spec=SPEC,
        vram_budget_bytes=16 * GiB,
        context_len=8192,
        quantization=quantization,
        gpu_memory_utilization=1.0,
    )
    return make_plan(request, replace(KNOWN_GPU_BANDWIDTHS[card], hbm_gbs=hbm_gbs)).decode_tok_s


def test_q5k_plans_its_int16x_lanes_row():
    # Random llama-8b:q5_k at 8K on an H100 (bench/results/2026-12-05-q5k-int16x): 329.2 tok/s on the
    # int16-x lanes, where the generic kernel's rate planned 184 (its own row: 162.1).
    assert _8k_tok_s("q5_k", "h100", 3006.0) == pytest.approx(329.2, rel=0.1)
    assert weight_read_gbs(SPEC, "q5_k") > QUANT_READ_GBS_GENERIC
    # its table swept for Q5_K (2026-12-05-h200-q41-configs): 343.7 on an H100 of 2.89 TB/s
    assert _8k_tok_s("q5_k", "h100", 2885.1) == pytest.approx(343.7, rel=0.1)


@pytest.mark.parametrize(("hbm_gbs", "measured"), [(4192.4, 400.1), (2885.1, 345.4), (2885.1, 346.1)])
def test_q4_1_plans_its_swept_lanes_rows(hbm_gbs, measured):
    # Random llama-8b:q4_1 at 8K (what AWQ / GPTQ checkpoints run as) on an H200 and an H100 with
    # the table swept for Q4_1 (bench/results/2026-12-05-h200-q41-configs); the H100's copy rate
    # caps the kernels' there.
    assert _8k_tok_s("q4_1", "h200", hbm_gbs) == pytest.approx(measured, rel=0.1)


@pytest.mark.parametrize("measured", [245.0, 245.5, 241.2, 241.3])
def test_q8_0_plans_its_int16x_lanes_rows(measured):
    # Random llama-8b:q8_0 at 8K on H100s of 2.89 TB/s, the int16-x lanes with their swept table
    # (bench/results/2026-12-05-h200-q41-configs, calls 15-16); the generic kernel's rate planned 211.6.
    assert _8k_tok_s("q8_0", "h100", 2885.1) == pytest.approx(measured, rel=0.1)


def test_a_gathered_token_embedding_is_not_streamed_at_hbm_rate():
    """Dense and fp8 decode reads its weights at HBM's rate: an untied token embedding (a row
    gathered a token) is not in the bytes a step streams. A tied one is the lm_head (streamed);
    the quantized rates are fit to all of a file's bytes, so theirs keeps it."""
    embedding = SPEC.vocab_size * SPEC.hidden_size * 2
    assert not SPEC.tie_word_embeddings
    for quantization in ("none", "fp8"):
        request = _plan(vram_budget_bytes=40 * GiB, quantization=quantization).request
        assert request.gathered_embedding_bytes == embedding
        assert request.weight_read_bytes == request.weight_bytes - embedding
    fp32 = _plan(vram_budget_bytes=60 * GiB, weight_dtype="float32").request
    assert fp32.weight_read_bytes == fp32.weight_bytes - 2 * embedding
    tied = _plan(spec=KNOWN_SHAPES["llama-1b"]).request
    assert tied.spec.tie_word_embeddings and tied.weight_read_bytes == tied.weight_bytes
    quantized = _plan(quantization="q4_k_m", max_num_seqs=1).request
    assert quantized.gathered_embedding_bytes == 0
    assert quantized.weight_read_bytes == quantized.weight_bytes
    streamed = _plan(vram_budget_bytes=40 * GiB).decode.weights_s * DEFAULT_BANDWIDTHS.hbm_gbs * 1e9
    assert streamed == pytest.approx(SPEC.weight_bytes(2) - embedding)

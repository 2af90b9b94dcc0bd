"""The engine on CUDA (Triton kernels, fused ops, CUDA graphs) against the CPU reference path.

Skipped without a GPU; run on the GPU machine with `python -m pytest tests/engine/test_gpu.py`.
"""

from __future__ import annotations

import pytest
import torch

from kvspill.kernels.gguf_formats import block_offsets
from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _release() -> None:
    """After `del engine`: free it before the next one sizes its pool from what the card has free."""
    import gc

    gc.collect()
    torch.cuda.empty_cache()


def _prompts(lengths: list[int], seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 256, (n,), generator=g).tolist() for n in lengths]


@pytest.mark.parametrize("fixture", ["tiny_llama_dir", "tiny_qwen2_dir", "tiny_qwen3_dir"])
def test_cuda_graphs_and_kernels_match_the_cpu_path(fixture, request):
    model_dir = str(request.getfixturevalue(fixture))
    prompts = _prompts([5, 17, 33, 1, 64, 90, 12, 48])
    params = SamplingParams(temperature=0.0, max_tokens=32, ignore_eos=True)
    cpu = LLM(model_dir, device="cpu", dtype="float32")
    want = [o.token_ids for o in cpu.generate(prompts, params)]
    for chunk in (7, 2048):
        gpu = LLM(
            model_dir,
            device="cuda",
            dtype="float32",
            max_num_batched_tokens=chunk,
            max_num_seqs=8,
            kv_cache_memory_bytes=256 * 2**20,
        )  # engines of earlier cases still hold theirs
        assert gpu.engine.runner.graphs is not None
        assert [o.token_ids for o in gpu.generate(prompts, params)] == want, f"chunk {chunk}"


def test_bf16_logits_close_to_fp32(tiny_llama_dir):
    prompt = _prompts([40], seed=1)[0]
    params = SamplingParams(temperature=0.0, max_tokens=1, logprobs=5)
    ref = LLM(str(tiny_llama_dir), device="cpu", dtype="float32").generate([prompt], params)[0]
    got = LLM(str(tiny_llama_dir), device="cuda", dtype="bfloat16", kv_cache_memory_bytes=256 * 2**20)
    got = got.generate([prompt], params)[0]
    ref_top = dict(ref.logprobs[0].top)
    for token, logprob in got.logprobs[0].top[:3]:
        assert token in ref_top and abs(logprob - ref_top[token]) < 0.1


def test_async_scheduling_matches_sync_on_cuda(tiny_llama_dir):
    """Graph buckets shrink as requests finish at different lengths (padding rows, fed ids from
    rows that moved); seeded sampling with a penalty and logprobs take the slower paths."""
    prompts = _prompts([5, 17, 33, 1, 64, 90, 12, 48], seed=2)
    params = [
        SamplingParams(temperature=0.0, max_tokens=m, ignore_eos=True) for m in (3, 40, 7, 25, 1, 33, 18, 40)
    ]
    params[2] = SamplingParams(temperature=0.8, seed=5, max_tokens=7, repetition_penalty=1.2, ignore_eos=True)
    params[6] = SamplingParams(temperature=0.0, max_tokens=18, logprobs=2, ignore_eos=True)
    runs = []
    for async_scheduling in (False, True):
        llm = LLM(
            str(tiny_llama_dir),
            device="cuda",
            dtype="float32",
            max_num_seqs=8,
            max_num_batched_tokens=64,
            async_scheduling=async_scheduling,
            kv_cache_memory_bytes=256 * 2**20,
        )
        assert llm.engine.async_scheduling is async_scheduling
        runs.append([(o.token_ids, o.finish_reason) for o in llm.generate(prompts, params)])
    assert runs[1] == runs[0]


def test_quantized_weights_on_cuda_match_the_torch_reference(monkeypatch):
    """random:llama-1b:q4_k through the Triton paths: CUDA-graph decode equals eager launches token
    for token; the quantized embedding and the GEMV lm_head equal the torch reference on the same
    blocks, the lm_head equals fp32 products of its exact weights. (Whole generations are not compared
    with the reference: random weights give near-tied logits, and the kernels keep the weights in
    fp32 where the reference rounds them to bf16.)"""
    from kvspill.kernels import quant_linear as ql
    from kvspill.model import quant

    prompts = _prompts([7, 64, 300])
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True, detokenize=False)
    # A 1 GiB KV pool: the reference path below dequantizes the 128K x 2048 lm_head beside the engine.
    small = dict(device="cuda", max_model_len=1024, gpu_memory_utilization=0.5, kv_cache_memory_bytes=2**30)
    eager = LLM("random:llama-1b:q4_k", enforce_eager=True, **small)
    eager_tokens = [o.token_ids for o in eager.generate(prompts, params)]
    del eager
    _release()
    llm = LLM("random:llama-1b:q4_k", **small)
    fast = [o.token_ids for o in llm.generate(prompts, params)]
    assert fast == eager_tokens  # the GEMV replays in CUDA graphs exactly as launched eagerly
    model = llm.engine.bundle.loaded.model
    ids = torch.tensor([1, 5, 900, 70000], device="cuda")
    embedded = model.model.embed_tokens(ids)
    hidden = torch.randn(3, 2048, device="cuda", dtype=torch.bfloat16)
    logits = model.compute_logits(hidden)  # 3 rows: the tensor-core kernel (gguf_mma.py)

    def reference(x, weight, bias=None, scratch=None, path=None):
        return ql.quant_linear(x, weight, bias, path="reference")

    monkeypatch.setattr(quant, "quant_linear", reference)
    monkeypatch.setattr(
        quant, "dequantize", lambda w, dtype: quant.dequantize_ref(w.data, w.qtype, w.in_features, dtype)
    )
    torch.testing.assert_close(model.model.embed_tokens(ids), embedded, rtol=0, atol=0)
    # The lm_head against fp32 products of the exact dequantized weights. The tensor-core kernel
    # rounds its scale and then each weight w = s * q + c to bf16 (2**-9 each, of |s q| and of
    # |w| <= |s q| + |c|), so a logit may be off by 2**-8 * sum |x| (|s q| + |c|) plus its own
    # bf16 rounding: that bound, per logit (one bf16 step of the largest logit was passed by
    # 0.78 against 0.75 on an H200, 2026-12-03: one logit of 384,768).
    head = model.lm_head.qweight
    w_head = quant.dequantize_ref(head.data, head.qtype, head.in_features, torch.float32)
    offset = block_offsets(head.data, head.qtype, head.in_features).repeat_interleave(32, dim=1)
    want = hidden.float() @ w_head.t()
    magnitude = (w_head - offset).abs() + offset.abs()
    bound = (hidden.float().abs() @ magnitude.t()) * 2**-8 + want.abs() * 2**-8
    assert ((logits.float() - want).abs() <= bound).all()


def test_gated_down_projection_gives_the_same_tokens(monkeypatch):
    """KVSPILL_GATED_WORDS=1 (the SiLU applied in the down projection's words-form x permutation)
    against the SiLU kernel then the permutation: the same values, so the same greedy tokens, on
    decode steps of 8 sequences (random:llama-1b:q4_k: Q4_K downs on the tensor-core words form)."""
    from kvspill.kernels import gguf_mma

    gated_calls = []
    words_x = gguf_mma.words_x

    def spy(x, qtype, t_pad, counters=None, gated=False):
        gated_calls.append(gated)
        return words_x(x, qtype, t_pad, counters, gated)

    monkeypatch.setattr(gguf_mma, "words_x", spy)
    prompts = _prompts([5, 9, 13, 17, 21, 25, 29, 33])
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True, detokenize=False)
    small = dict(device="cuda", max_model_len=256, gpu_memory_utilization=0.5, kv_cache_memory_bytes=2**28)
    runs = []
    for on in ("0", "1"):
        monkeypatch.setenv("KVSPILL_GATED_WORDS", on)
        gated_calls.clear()
        llm = LLM("random:llama-1b:q4_k", **small)
        runs.append([o.token_ids for o in llm.generate(prompts, params)])
        assert any(gated_calls) == (on == "1")
        del llm
        _release()
    assert runs[1] == runs[0]


def _spy_fused_layers(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """A list that fills with the decoder layers that run LlamaDecoderLayer.forward_fused."""
    from kvspill.model.llama import LlamaDecoderLayer

    fused_calls: list[object] = []
    forward_fused = LlamaDecoderLayer.forward_fused

    def spy(self, *args):
        fused_calls.append(self)
        return forward_fused(self, *args)

    monkeypatch.setattr(LlamaDecoderLayer, "forward_fused", spy)
    return fused_calls


def _same_greedy_tokens_up_to_a_near_tie(want: list, got: list, nats: float = 0.1) -> None:
    """Greedy outputs (with logprobs >= 2) of two forms that differ by a rounding (vLLM's
    check_logprobs_close): the same tokens, or the same up to a step where each run's token is the
    other's runner-up within `nats` of its best; past that step they may part."""
    for w, g in zip(want, got, strict=True):
        for step, (a, b) in enumerate(zip(w.logprobs, g.logprobs, strict=True)):
            if a.token_id == b.token_id:
                continue
            a_top, b_top = dict(a.top), dict(b.top)
            assert b.token_id in a_top and a.token_id in b_top, f"step {step}: {a.top} against {b.top}"
            gap = max(a_top[a.token_id] - a_top[b.token_id], b_top[b.token_id] - b_top[a.token_id])
            assert gap < nats, f"step {step}: tokens {a.token_id} / {b.token_id} apart by {gap:.3f} nats"
            break


@pytest.mark.parametrize(
    ("model", "extra"),
    [
        ("tiny_llama_dir", {"quantization": "fp8"}),
        ("tiny_qwen2_dir", {"quantization": "fp8"}),
        ("tiny_qwen3_dir", {"quantization": "fp8"}),
        ("tiny_llama_dir", {}),  # dense: fused in the handoff form only (env.norm_handoff_on)
    ],
)
@pytest.mark.parametrize("handoff", ["0", "1"])
def test_fused_decode_gives_the_same_tokens(model, extra, handoff, request, monkeypatch):
    """KVSPILL_FUSED_DECODE=1 (the default: the norms, SiLU and residual adds folded into one
    token's GEMVs, model/llama.LlamaDecoderLayer; with the norm handoff, the default, each norm
    after a residual add handed from o / down to the GEMV after it) against the separate kernels:
    four sequences in bf16 (one-token steps, graphs captured), the same greedy tokens, up to a near
    tie (both forms move a rounding: the tiny random Qwen2 fp8 parts at one, 2026-12-07)."""
    fused_calls = _spy_fused_layers(monkeypatch)
    monkeypatch.setenv("KVSPILL_NORM_HANDOFF", handoff)
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True, detokenize=False, logprobs=2)
    runs = []
    for on in ("0", "1"):
        monkeypatch.setenv("KVSPILL_FUSED_DECODE", on)
        fused_calls.clear()
        llm = LLM(
            str(request.getfixturevalue(model)),
            device="cuda",
            dtype="bfloat16",
            kv_cache_memory_bytes=2**26,
            **extra,
        )
        runs.append(llm.generate(_prompts([37, 5, 90, 12], seed=3), params))
        assert bool(fused_calls) == (on == "1" and ("quantization" in extra or handoff == "1"))
        del llm
        _release()
    _same_greedy_tokens_up_to_a_near_tie(runs[0], runs[1])


def test_the_norm_handoff_is_every_formats_default(tiny_llama_dir, monkeypatch):
    """env.norm_handoff_on: unset, fp8, dense and GGUF models hand their norms on (their fused
    steps make NormHandoffs)."""
    from kvspill.model import llama

    monkeypatch.delenv("KVSPILL_NORM_HANDOFF", raising=False)
    made = []
    handoff_of = llama.handoff_of
    monkeypatch.setattr(llama, "handoff_of", lambda norm: made.append(norm) or handoff_of(norm))
    fused_calls = _spy_fused_layers(monkeypatch)
    params = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True, detokenize=False)
    small = dict(device="cuda", max_model_len=512, gpu_memory_utilization=0.5, kv_cache_memory_bytes=2**26)
    for name, extra in (
        (str(tiny_llama_dir), {"quantization": "fp8"}),
        (str(tiny_llama_dir), {}),
        ("random:llama-1b:q4_k_m", {}),
    ):
        made.clear()
        fused_calls.clear()
        llm = LLM(name, **small, **extra)
        llm.generate(_prompts([9]), params)
        assert made and fused_calls, name
        del llm
        _release()


@pytest.mark.parametrize("offload_gb", [1e-6, 1e3])  # the first layer; every layer
def test_cpu_offload_gives_the_resident_models_tokens(tiny_llama_dir, offload_gb):
    prompts = _prompts([5, 17, 33, 64])
    params = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
    resident = LLM(str(tiny_llama_dir), device="cuda", enforce_eager=True, kv_cache_memory_bytes=256 * 2**20)
    expect = [o.token_ids for o in resident.generate(prompts, params)]
    del resident
    _release()
    offloaded = LLM(
        str(tiny_llama_dir), device="cuda", cpu_offload_gb=offload_gb, kv_cache_memory_bytes=256 * 2**20
    )
    loaded = offloaded.engine.bundle.loaded
    assert loaded.offloader is not None and loaded.offloader.host_bytes > 0
    assert all(h.is_pinned() for h in loaded.offloader.host)
    assert [o.token_ids for o in offloaded.generate(prompts, params)] == expect


def test_attention_cpu_on_a_gpu_keeps_the_kv_in_ram_and_gives_the_cpu_paths_tokens(tiny_llama_dir):
    """--attention cpu on CUDA (config.with_attention_mode): a gpu tier of a few blocks, the KV in
    the cpu tier, decode rows attending it on the CPU, prefill chunks streaming it to the GPU.
    Several sequences at once, prompts longer than the gpu tier: the CPU engine's greedy tokens."""
    from kvspill.config import EngineConfig, cpu_attention_gpu_blocks

    prompts = _prompts([300, 17, 180])
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    cpu = LLM(str(tiny_llama_dir), device="cpu", dtype="float32")
    want = [o.token_ids for o in cpu.generate(prompts, params)]
    opts = dict(max_model_len=512, max_num_seqs=3, max_num_batched_tokens=32, enable_prefix_caching=False)
    llm = LLM(str(tiny_llama_dir), device="cuda", dtype="float32", attention="cpu", **opts)
    storage = llm.engine.bundle.storage
    assert storage.device.type == "cuda" and storage.cpu_pinned
    assert storage.num_blocks == cpu_attention_gpu_blocks(EngineConfig(**opts)) == 3 * 3 + 2 + 2
    assert [o.token_ids for o in llm.generate(prompts, params)] == want
    stats = llm.engine.kv_stats()
    assert stats.scheduler is not None and stats.scheduler.kv_tiers.kv_block_moves["gpu->cpu"] > 20
    cold = stats.runner.cold
    assert cold is not None and cold.cpu_bytes > 0 and cold.stream_bytes > 0


def _random_1b_q4_k_m_tokens() -> tuple[list, list]:
    """random:llama-1b:q4_k_m's greedy tokens (one-token steps in CUDA graphs): two prompts alone,
    then five sequences at a time."""
    prompts = _prompts([9, 200, 33, 70, 5])
    params = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True, detokenize=False)
    small = dict(device="cuda", max_model_len=512, gpu_memory_utilization=0.5, kv_cache_memory_bytes=2**28)
    llm = LLM("random:llama-1b:q4_k_m", **small)
    alone = [llm.generate([p], params)[0].token_ids for p in prompts[:2]]
    together = [o.token_ids for o in llm.generate(prompts, params)]
    del llm
    _release()
    return alone, together


def test_mixed_qkv_in_one_launch_gives_the_two_launches_tokens(monkeypatch):
    """random:llama-1b:q4_k_m (half its layers' qkv is Q4_K q, k and Q6_K v): one-token steps run
    those parts in one launch (kernels/gguf_gemv_mixed.py), captured in CUDA graphs; the greedy
    tokens equal KVSPILL_MIXED_GEMV=0's two launches, alone and five sequences at a time."""
    runs = []
    for switch in ("1", "0"):
        monkeypatch.setenv("KVSPILL_MIXED_GEMV", switch)
        runs.append(_random_1b_q4_k_m_tokens())
    assert runs[0] == runs[1]


def test_norm_handoff_on_gguf_gives_the_separate_kernels_tokens(monkeypatch):
    """random:llama-1b:q4_k_m with KVSPILL_NORM_HANDOFF=1 (o and down add into the residual stream
    and hand h * weight and their sums of h^2 on; the mixed qkv and gate_up scale by rstd) against
    the separate RMSNorm kernels: one-token steps in CUDA graphs, alone and five sequences at a
    time, the same greedy tokens (the handoff moves one rounding: a flip here says it matters)."""
    fused_calls = _spy_fused_layers(monkeypatch)
    runs = []
    for switch in ("0", "1"):
        monkeypatch.setenv("KVSPILL_NORM_HANDOFF", switch)
        fused_calls.clear()
        runs.append(_random_1b_q4_k_m_tokens())
        assert bool(fused_calls) == (switch == "1")
    assert runs[1] == runs[0]

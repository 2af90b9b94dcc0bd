"""Context shift end to end on the CPU (--context-shift): generation goes on past max_model_len,
and what follows a shift is what a fresh run on the kept tokens, at the same positions, gives:
- one layer, keys turned: layer 0's K and V depend only on each token and its position, so the
  turned keys are a fresh prefill's and the greedy tokens after the shift are a fresh run's;
- any depth, every kept token after the sinks computed again (overlap >= keep): a fresh run's;
- any depth, keys turned: layer 0's stored keys equal a fresh prefill's (the deeper layers' are
  not: they saw the dropped tokens, scheduler/context_shift.py says why).
Tiny random Llamas (llama3 RoPE scaling) and the embedded SmolLM2."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kvspill.errors import InvalidParameterError
from kvspill.kernels.kv_quant import dequantize_kv
from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams

LEN, BS, KEEP, SINKS = 64, 8, 16, 1
PROMPT = [17, 3, 99, 41, 250, 8, 61, 77, 130, 5]
AFTER = 6  # tokens checked after the shift (fewer than a second shift needs)


@pytest.fixture(scope="module")
def one_layer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
        num_hidden_layers=1, max_position_embeddings=1024, initializer_range=0.1, bos_token_id=1,
        eos_token_id=2, tie_word_embeddings=False,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 16},
    )  # fmt: skip
    path = tmp_path_factory.mktemp("one_layer")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(str(path))
    return path


def engine(model: str | None, **flags: object) -> LLM:
    base: dict[str, object] = dict(
        device="cpu", dtype="float32", max_model_len=LEN, block_size=BS, num_sink_blocks=SINKS,
        context_shift=True, context_shift_keep=KEEP, async_scheduling=False,
    )  # fmt: skip
    base.update(flags)
    if (
        model is not None
        and "skip_tokenizer_init" not in base
        and not (Path(model) / "tokenizer.json").exists()
    ):
        base["skip_tokenizer_init"] = True
    return LLM(model, **base)


def greedy(llm: LLM, prompt: list[int], max_tokens: int) -> list[int]:
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True, detokenize=False)
    return llm.generate([prompt], params)[0].token_ids


def kept_context(prompt: list[int], outputs: list[int]) -> tuple[list[int], int]:
    """The context after the first shift (sinks + the last KEEP tokens of the full one) and the
    outputs generated before it filled."""
    full = (prompt + outputs)[:LEN]
    drop = (LEN - SINKS * BS - KEEP) // BS * BS
    return full[: SINKS * BS] + full[SINKS * BS + drop :], LEN - len(prompt)


def layer_keys(llm: LLM, layer: int, num_tokens: int) -> torch.Tensor:
    """The first `num_tokens` stored keys of the one running-or-last request (its block table), fp32."""
    runner = llm.engine.runner
    (state,) = runner.states.values()
    kv = dequantize_kv(runner.storage.layer(layer)[state.block_ids])  # [blocks, 2, bs, heads, dim]
    keys = kv[:, 0].reshape(-1, *kv.shape[-2:])[:num_tokens]
    basis = runner.storage.rotation(layer)
    return keys @ basis if basis is not None else keys


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_one_layer_turned_keys_continue_as_a_fresh_run(one_layer_dir: Path, async_scheduling: bool) -> None:
    shifted = engine(str(one_layer_dir), async_scheduling=async_scheduling)
    outputs = greedy(shifted, PROMPT, LEN - len(PROMPT) + AFTER)
    kept, before = kept_context(PROMPT, outputs)
    fresh = engine(str(one_layer_dir), context_shift=False)
    assert outputs[before:] == greedy(fresh, kept, AFTER)


@pytest.mark.parametrize("kv_cache_dtype", ["auto", "int8", "fp8"])
def test_turned_keys_equal_a_fresh_prefills_layer_0(tiny_llama_dir: Path, kv_cache_dtype: str) -> None:
    """Three layers, llama3 RoPE: stop one token after the shift, then compare layer 0's keys."""
    shifted = engine(str(tiny_llama_dir), kv_cache_dtype=kv_cache_dtype)
    params = SamplingParams(
        temperature=0, max_tokens=LEN - len(PROMPT) + 1, ignore_eos=True, detokenize=False
    )
    shifted.engine.add_request(PROMPT, params)
    while shifted.engine.scheduler.get_num_unfinished_requests():
        shifted.engine.step()
        request = next(iter(shifted.engine.scheduler.requests.values()), None)
        if request is not None and request.num_shifted_tokens and not request.num_pending_tokens:
            break
    request = next(iter(shifted.engine.scheduler.requests.values()))
    kept = list(request.all_token_ids)
    shifted.engine.step()  # the shift's step: keys turned, the newest token computed
    fresh = engine(str(tiny_llama_dir), context_shift=False, kv_cache_dtype=kv_cache_dtype)
    fresh.engine.add_request(kept, SamplingParams(max_tokens=1, detokenize=False))
    fresh.engine.step()  # prefill (the request's state stays in the runner until the next step)
    got, want = layer_keys(shifted, 0, len(kept)), layer_keys(fresh, 0, len(kept))
    tol = {"auto": 1e-4, "int8": 0.05, "fp8": 0.3}[kv_cache_dtype] * want.abs().max()
    assert (got - want).abs().max() <= tol


def test_overlap_recomputes_into_a_fresh_run(tiny_llama_dir: Path) -> None:
    shifted = engine(str(tiny_llama_dir), context_shift_overlap=KEEP)
    outputs = greedy(shifted, PROMPT, LEN - len(PROMPT) + AFTER)
    kept, before = kept_context(PROMPT, outputs)
    fresh = engine(str(tiny_llama_dir), context_shift=False)
    assert outputs[before:] == greedy(fresh, kept, AFTER)


def test_cold_tiers_are_refused_at_start(tiny_llama_dir: Path) -> None:
    with pytest.raises(InvalidParameterError, match="--num-cpu-kv-blocks.*drop --context-shift"):
        engine(str(tiny_llama_dir), num_cpu_kv_blocks=8)
    with pytest.raises(InvalidParameterError, match="--context-shift-keep 56 leaves no block"):
        engine(str(tiny_llama_dir), context_shift_keep=56)


def test_a_request_asks_for_it_and_max_tokens_may_pass_the_context(tiny_llama_dir: Path) -> None:
    llm = engine(str(tiny_llama_dir), context_shift=False)
    params = SamplingParams(temperature=0, max_tokens=3 * LEN, ignore_eos=True, detokenize=False)
    with pytest.raises(Exception, match="context"):
        llm.generate([PROMPT], params)
    out = llm.generate([PROMPT], SamplingParams(**{**params.__dict__, "context_shift": True}))[0]
    assert len(out.token_ids) == 3 * LEN and out.finish_reason == "length"


@pytest.mark.slow
def test_embedded_model_streams_past_two_shifts() -> None:
    """SmolLM2: a stream of 2x max_model_len tokens goes on (two shifts: each keeps KEEP tokens);
    after the first shift with every kept token recomputed, its greedy tokens are those of a fresh
    run on the kept tokens."""
    shifted = engine(None, context_shift_overlap=KEEP)
    prompt = shifted.engine.encode("def fibonacci(n):\n    ")
    outputs = greedy(shifted, prompt, 2 * LEN)
    assert len(outputs) == 2 * LEN
    kept, before = kept_context(prompt, outputs)
    fresh = engine(None, context_shift=False)
    assert outputs[before : before + AFTER] == greedy(fresh, kept, AFTER)


def test_the_http_extra_reaches_the_sampling_params() -> None:
    from kvspill.server.protocol import ChatCompletionRequest, CompletionRequest

    done = CompletionRequest(prompt=[1, 2], max_tokens=500, context_shift=True)._params(500, None)
    assert done.context_shift is True
    chat = ChatCompletionRequest(messages=[{"role": "user", "content": "hi"}], context_shift=False)
    assert chat._params(None, None).context_shift is False
    assert CompletionRequest(prompt=[1])._params(16, None).context_shift is None

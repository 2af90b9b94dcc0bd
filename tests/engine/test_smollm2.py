"""The embedded SmolLM2-135M-Instruct end to end: greedy output equals transformers', chat works."""

from __future__ import annotations

import pytest
import torch

from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smol_llm() -> LLM:
    return LLM(None, device="cpu", dtype="float32", max_model_len=2048)


def test_greedy_64_tokens_match_transformers(smol_llm, smollm2_hf):
    messages = [{"role": "user", "content": "Write a Python function that reverses a string."}]
    prompt = smol_llm.chat_prompt(messages)
    ours = smol_llm.generate([prompt], SamplingParams(temperature=0, max_tokens=64, ignore_eos=True))[0]
    with torch.no_grad():
        # The explicit mask matters: pad_token_id is <|im_end|> (2), which the chat prompt
        # contains, and generate() would otherwise mask those prompt tokens out.
        ids = torch.tensor([prompt])
        ref = smollm2_hf.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=64,
            min_new_tokens=64,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=2,
        )
    assert ours.token_ids == ref[0, len(prompt) :].tolist()


def test_chat_answers_and_stops_at_end_of_turn(smol_llm):
    out = smol_llm.chat(
        [{"role": "user", "content": "What is the capital of France?"}],
        SamplingParams(temperature=0, max_tokens=48),
    )[0]
    assert "Paris" in out.text
    assert out.finish_reason == "stop"
    assert "<|im_end|>" not in out.text


def test_chat_continues_the_final_message_as_vllm(smol_llm):
    """`continue_final_message` leaves the assistant's message open (no <|im_end|> after it) and
    generation goes on from its text; the template's variables and `tools` reach it."""
    partial = [
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "The capital of France is"},
    ]
    kwargs = {"add_generation_prompt": False, "continue_final_message": True}
    prompt = smol_llm.chat_prompt(partial, **kwargs)
    assert smol_llm.chat_prompt(partial[:1])[-1] != prompt[-1]
    assert smol_llm.engine.tokenizer.decode(prompt).endswith("The capital of France is")
    out = smol_llm.chat(partial, SamplingParams(temperature=0, max_tokens=8), **kwargs)[0]
    assert "Paris" in out.text and out.prompt_token_ids == prompt
    with pytest.raises(ValueError, match="continue_final_message"):
        smol_llm.chat(partial, continue_final_message=True)  # with the generation prompt
    variable = smol_llm.chat_prompt(partial[:1], chat_template_kwargs={"enable_thinking": False})
    assert variable == smol_llm.chat_prompt(partial[:1])  # SmolLM2's template has no such variable
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    with_tools = smol_llm.tokenizer.decode(smol_llm.chat_prompt(partial[:1], tools=[weather]))
    assert "get_weather" in with_tools


def test_stop_string_cuts_the_text(smol_llm):
    prompt = smol_llm.chat_prompt([{"role": "user", "content": "Count from 1 to 10, separated by commas."}])
    full = smol_llm.generate([prompt], SamplingParams(temperature=0, max_tokens=40))[0].text
    assert "4" in full
    cut = smol_llm.generate([prompt], SamplingParams(temperature=0, max_tokens=40, stop=["4"]))[0]
    assert cut.finish_reason == "stop" and cut.stop_reason == "4"
    assert cut.text == full[: full.index("4")]


def test_streamed_deltas_concatenate_to_the_text(smol_llm):
    prompt = smol_llm.chat_prompt([{"role": "user", "content": "Say hello in French and in Japanese."}])
    params = SamplingParams(temperature=0, max_tokens=32)
    chunks = [o.delta_text for o in smol_llm.stream(prompt, params)]
    assert "".join(chunks) == smol_llm.generate([prompt], params)[0].text
    assert all("\ufffd" not in c for c in chunks)


def test_logprobs_are_returned(smol_llm):
    out = smol_llm.generate(["The sky is"], SamplingParams(temperature=0, max_tokens=4, logprobs=3))[0]
    assert len(out.logprobs) == 4
    for lp, tok in zip(out.logprobs, out.token_ids, strict=True):
        assert lp.token_id == tok and lp.logprob <= 0.0 and len(lp.top) == 3
        assert lp.top[0][0] == tok  # greedy picks the most likely token

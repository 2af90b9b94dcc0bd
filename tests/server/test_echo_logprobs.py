"""`echo` with `logprobs` on /v1/completions through the openai client (lm-eval's scoring call:
`echo=True, logprobs=1, max_tokens=0`): the prompt's token logprobs equal the engine's own."""

from __future__ import annotations

import openai
import pytest

from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams

from .conftest import start_server, stop_server

PROMPT = "the cat sat on the mat hello world a b c the cat"


@pytest.fixture(scope="module")
def server(tiny_llama_dir, tmp_path_factory):
    s = start_server(tiny_llama_dir, "--dtype", "float32", log=tmp_path_factory.mktemp("srv") / "server.log")
    yield s
    stop_server(s)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def engine_prompt_logprobs(tiny_llama_dir):
    llm = LLM(str(tiny_llama_dir), device="cpu", dtype="float32")
    ids = llm.engine.encode(PROMPT)
    out = llm.generate([ids], SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=2))[0]
    return ids, out.prompt_logprobs, llm.tokenizer


def test_echo_scores_the_prompt_like_the_engine(server, client, engine_prompt_logprobs):
    ids, want, tok = engine_prompt_logprobs
    out = client.completions.create(
        model=server.model, prompt=PROMPT, echo=True, logprobs=2, max_tokens=0, temperature=0
    )
    choice = out.choices[0]
    assert choice.text == PROMPT
    lp = choice.logprobs
    assert lp.tokens == [tok.decode([t]) for t in ids]
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert len(lp.token_logprobs) == len(ids) == len(lp.text_offset)
    for got, entry in zip(lp.token_logprobs[1:], want[1:], strict=True):
        assert abs(got - entry.logprob) < 1e-4
    for got_top, entry in zip(lp.top_logprobs[1:], want[1:], strict=True):
        # legacy top_logprobs are keyed by text (two ids of one text share a key, as in OpenAI's API)
        want_top = {tok.decode([t]): v for t, v in entry.top}
        assert got_top.keys() == want_top.keys()
        assert max(abs(got_top[k] - want_top[k]) for k in want_top) < 1e-4
    assert lp.text_offset[0] == 0 and lp.text_offset[1] == len(lp.tokens[0])
    assert out.usage.prompt_tokens == len(ids) and out.usage.completion_tokens == 0


def test_echo_with_generation_and_token_prompts(server, client, engine_prompt_logprobs):
    ids, want, tok = engine_prompt_logprobs
    out = client.completions.create(
        model=server.model, prompt=[ids, ids[:5]], echo=True, logprobs=1, max_tokens=3, temperature=0
    )
    first = out.choices[0]
    prompt_text = tok.decode(ids, skip_special_tokens=False)
    assert first.text.startswith(prompt_text)
    lp = first.logprobs
    assert len(lp.tokens) == len(ids) + 3
    assert abs(lp.token_logprobs[-4] - want[-1].logprob) < 1e-4  # the last prompt token
    assert lp.text_offset[len(ids)] == len(prompt_text)  # generated offsets follow the echoed prompt
    assert len(out.choices[1].logprobs.tokens) == 5 + 3
    plain = client.completions.create(
        model=server.model, prompt=PROMPT, echo=True, max_tokens=2, temperature=0
    )
    assert plain.choices[0].text.startswith(PROMPT) and plain.choices[0].logprobs is None


def test_echo_refuses_what_it_cannot_answer(server, client):
    for kwargs, param in (
        (dict(prompt=[1, 10**9], echo=True), "prompt"),
        (dict(prompt="a b", echo=True, stream=True), "stream"),
        (dict(prompt="a b", max_tokens=0), "max_tokens"),
    ):
        with pytest.raises(openai.BadRequestError) as e:
            client.completions.create(model=server.model, **kwargs)
        assert e.value.body["param"] == param

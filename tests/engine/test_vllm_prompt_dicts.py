"""vLLM's call shapes in the Python API: TextPrompt {"prompt": str} and TokensPrompt
{"prompt_token_ids": [...]} dicts in `generate` and `stream`, and `sampling_params=` (vLLM's name of
`params`) in `generate` and `chat`; anything else is an InvalidParameterError saying what a prompt
is, never a TypeError from inside the engine."""

from __future__ import annotations

import numpy as np
import pytest

from kvspill.errors import InvalidParameterError
from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams

GREEDY = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True)


@pytest.fixture(scope="module")
def tiny(tiny_llama_dir) -> LLM:
    return LLM(str(tiny_llama_dir), device="cpu", dtype="float32", max_model_len=128)


def test_prompt_dicts_run_as_their_text_or_ids(tiny: LLM) -> None:
    ids = tiny.engine.encode("hello world")
    want = [o.token_ids for o in tiny.generate([ids, "hello world"], GREEDY)]
    got = tiny.generate([{"prompt_token_ids": ids}, {"prompt": "hello world"}], GREEDY)
    assert [o.token_ids for o in got] == want
    assert tiny.generate({"prompt_token_ids": ids}, GREEDY)[0].token_ids == want[0]  # one dict alone
    # vLLM: a TokensPrompt's ids win over a "prompt" text beside them
    assert tiny.generate([{"prompt_token_ids": ids, "prompt": "cat"}], GREEDY)[0].token_ids == want[0]
    assert tiny.generate([np.array(ids)], GREEDY)[0].token_ids == want[0]  # numpy ids as before
    streamed = list(tiny.stream({"prompt_token_ids": ids}, GREEDY))
    assert streamed[-1].token_ids == want[0]


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        ({"prompt_ids": [1, 2]}, "takes 'prompt' or 'prompt_token_ids'; kvspill takes no \\['prompt_ids'\\]"),
        ({"prompt": [1, 2]}, "'prompt' must be a str"),
        ({}, "an empty prompt dict"),
        ({"prompt_token_ids": [1, "x"]}, "token ids are ints; got 'x'"),
        (3.5, "got a float: a prompt is a str, a list of token ids, or vLLM's"),
    ],
)
def test_anything_else_says_what_a_prompt_is(tiny: LLM, prompt, message: str) -> None:
    with pytest.raises(InvalidParameterError, match=message) as e:
        tiny.generate([prompt], GREEDY)
    assert e.value.param == "prompt"
    assert not tiny.engine.has_unfinished_requests()


def test_sampling_params_is_vllms_name_of_params(tiny: LLM) -> None:
    want = tiny.generate(["hello"], GREEDY)[0].token_ids
    assert tiny.generate(["hello"], sampling_params=GREEDY)[0].token_ids == want
    chat = [{"role": "user", "content": "hello"}]
    assert tiny.chat(chat, sampling_params=GREEDY)[0].token_ids == tiny.chat(chat, GREEDY)[0].token_ids
    with pytest.raises(InvalidParameterError, match="not both"):
        tiny.generate(["hello"], GREEDY, sampling_params=GREEDY)

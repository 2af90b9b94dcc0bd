"""The Python API takes the command line's text forms of the engine options (`max_model_len="16K"`,
`rope_scaling="yarn:4"`, sizes such as "32GiB"), read by the flags' own parsers; a value of a wrong
type is an InvalidParameterError naming the field and the accepted forms, never a TypeError or an
AttributeError from inside EngineConfig."""

from __future__ import annotations

import pytest

from kvspill.config import EngineConfig
from kvspill.errors import InvalidParameterError
from kvspill.options import python_engine_kwargs


def test_text_forms_are_read_as_the_flags_read_them() -> None:
    kwargs = python_engine_kwargs(
        {"max_model_len": "16K", "rope_scaling": "yarn:4", "cpu_kv_budget_bytes": "2GiB", "device": "cpu"}
    )
    assert kwargs == {
        "max_model_len": 16384,
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0},
        "cpu_kv_budget_bytes": 2 * 2**30,
        "device": "cpu",
    }
    assert python_engine_kwargs({"rope_scaling": '{"rope_type": "linear", "factor": 2}'})["rope_scaling"] == {
        "rope_type": "linear",
        "factor": 2,
    }
    assert python_engine_kwargs({"max_model_len": 4096}) == {"max_model_len": 4096}  # as it is


@pytest.mark.parametrize(
    ("kwargs", "param", "message"),
    [
        ({"max_model_len": "16Q"}, "max_model_len", "cannot read '16Q' as a token count"),
        ({"rope_scaling": "yarn:x"}, "rope_scaling", "TYPE:FACTOR such as yarn:4"),
    ],
)
def test_bad_text_names_the_field(kwargs, param: str, message: str) -> None:
    with pytest.raises(InvalidParameterError, match=message) as e:
        python_engine_kwargs(kwargs)
    assert e.value.param == param


@pytest.mark.parametrize(
    ("kwargs", "param", "message"),
    [
        ({"max_model_len": 1.5}, "max_model_len", "an int such as 16384"),
        ({"max_model_len": "16K"}, "max_model_len", "an int such as 16384"),  # EngineConfig itself: no text
        ({"rope_scaling": 4}, "rope_scaling", "a dict such as"),
        ({"rope_scaling": "yarn:4"}, "rope_scaling", "a dict such as"),
    ],
)
def test_engine_config_names_the_field_of_a_wrong_type(kwargs, param: str, message: str) -> None:
    with pytest.raises(InvalidParameterError, match=message) as e:
        EngineConfig(**kwargs)
    assert e.value.param == param


def test_llm_takes_the_text_forms(tiny_llama_dir) -> None:
    from kvspill.llm import LLM

    llm = LLM(str(tiny_llama_dir), device="cpu", dtype="float32", max_model_len="2K", rope_scaling="yarn:2")
    assert llm.engine.max_model_len == 2048
    assert llm.engine.config.rope_scaling == {"rope_type": "yarn", "factor": 2.0}
    assert llm.engine.bundle.loaded.hf_config.rope_parameters["rope_type"] == "yarn"

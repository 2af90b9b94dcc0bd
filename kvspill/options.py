"""The engine's flag set, declared once and typer-free: `EngineOptions`, one field per flag.

Every command that builds (or plans) an engine takes the same flags: `generate`, `chat`, `serve`,
`plan` and `bench progressive | stability | compare`; the registry's profiles and the manager's
API take the same names. The command line is one edge of this set: `cli/engine_options.py` shows
these fields to typer (`@with_engine_options`); `docs/flags.md` is generated from them.

Invariants:
- One flag per `EngineConfig` field, named after it (`--block-size` sets `block_size`), except:
  `model` (each command keeps its own `--model` option or MODEL argument) and `trust_remote_code`
  (no flag: its only valid value is its default, False, since kvspill never runs code from a model
  repository; EngineConfig refuses True). Sizes drop `_bytes` (`--vram-budget 24GiB` sets
  `vram_budget_bytes`) and `seed` is `--engine-seed` (`--seed` is already the per-request sampling
  seed in `generate`/`chat` and the prompt seed in the bench suites).
  tests/cli/test_engine_options.py walks EngineConfig to keep it so.
- A flag left out is None here and `EngineConfig`'s own default applies: defaults live in
  config.py alone, and each help text quotes its default from there (`default_text`).
- Every flag also reads `KVSPILL_<FLAG>` (`KVSPILL_VRAM_BUDGET=24GiB`); the command line wins
  (`env_var`).
- `engine_kwargs` is a plain function of the object: sizes go through `plan.units.parse_size` (a
  unit is required), token counts through `parse_tokens` (128K);
  `--rope-scaling` through `config.parse_rope_scaling`, and `EngineConfig` validates the rest, so
  a bad value is one `error:` line and exit 2 in every command.
- No typer, click or I/O here: importing this module is cheap and safe from any layer above config.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from kvspill.config import EngineConfig, parse_layer_list, parse_rope_scaling
from kvspill.plan.units import parse_size, parse_tokens


def _rope(text: str, flag: str) -> dict[str, Any]:
    return parse_rope_scaling(text)


def _flag(
    what: str,
    config: str | None = None,
    *,
    default: str | None = None,
    parse: Callable[[str, str], Any] | None = None,
) -> Any:
    """One engine flag: `what` it does, the EngineConfig field it sets (default: its own name),
    its default in words (default: EngineConfig's value) and a parser of its text."""
    return field(default=None, metadata={"what": what, "config": config, "default": default, "parse": parse})


@dataclass(frozen=True)
class EngineOptions:
    """The engine flags as given on the command line or in `KVSPILL_*`; None: not given."""

    mode: str | None = _flag(
        "What to run where no flag says: default (the model's trained context, exact; a cpu tier only for "
        "what the GPU cannot hold), extended (4x the context, RoPE extended, exact; RAM and disk tiers) or "
        "extreme (the longest context the host holds, sparse cold attention; RAM and disk tiers). "
        "--print-config and `kvspill plan` show what it expands to; a flag given wins."
    )
    device: str | None = _flag(
        "Where to run: auto, cpu, cuda or cuda:N.", default="auto, cuda when available"
    )
    dtype: str | None = _flag(
        "Weight and activation dtype: auto, float32, float16 or bfloat16.",
        default="auto: bfloat16 on cuda; on cpu float16 or float32, whichever this CPU runs faster",
    )
    max_model_len: str | None = _flag(
        "Longest sequence (prompt + output) in tokens, e.g. 32768 or 128K.",
        default="the model's, after --rope-scaling",
        parse=parse_tokens,
    )
    block_size: int | None = _flag(
        "Tokens per KV block: 8, 16, 32, 64 or 128.",
        default="16; 8 with --cold-attention sparse and a --sparse-budget-tokens under 1024",
    )
    max_num_batched_tokens: str | None = _flag(
        "Token budget per step (the prefill chunk size), e.g. 2048 or 4K.", parse=parse_tokens
    )
    max_num_seqs: int | None = _flag("Most sequences running at once.")
    rope_scaling: str | None = _flag(
        "RoPE scaling override: TYPE:FACTOR (e.g. yarn:4) or a JSON object.",
        default="the model's",
        parse=_rope,
    )
    enforce_eager: bool | None = _flag("Disable CUDA graphs.", default="off")
    async_scheduling: bool | None = _flag(
        "Launch step N+1 before reading step N's tokens (outputs reach clients a step later).",
        default="on with cuda, off on cpu",
    )
    target_itl_ms: float | None = _flag(
        "While requests decode, size prefill chunks so each step takes about this long (ms); 0: off.",
        default="2.5x a decode step (at least 10 ms) with cuda, off on cpu",
    )
    kernel_warmup: bool | None = _flag(
        "Run throwaway requests at start so the first request pays no kernel compiles, then cache the "
        "chat template's opening; --no-kernel-warmup: neither.",
        default="on with cuda; on cpu only the chat template's opening",
    )
    enable_prefix_caching: bool | None = _flag("Reuse the KV blocks of shared prompt prefixes.", default="on")
    skip_tokenizer_init: bool | None = _flag(
        "Load no tokenizer: requests send and receive token ids (vLLM's option).", default="off"
    )
    quantization: str | None = _flag(
        "Weight format: gguf (keep a GGUF quantized on any device), fp8 (a bf16/fp16 checkpoint's "
        "layers in float8 with per-row scales; CUDA sm_89+), awq / gptq (an int4 checkpoint's own "
        "format, read anyway) or none (dequantize a GGUF to --dtype); "
        "`plan` also takes a GGUF type to see what a file of it would take (q4_k_m, q8_0, ...).",
        default="the file's own; a GGUF is dequantized on a cpu without AVX-512 or g++ (the CPU GGUF kernel)",
    )
    chat_template: str | None = _flag(
        "A Jinja chat template file to use instead of the model's (e.g. one that takes `tools`).",
        default="the model's",
    )
    tokenizer: str | None = _flag(
        "The tokenizer of another directory, .gguf file or cached Hugging Face id (e.g. the base model "
        "of a GGUF file), with its chat template, instead of the model's own (vLLM's option).",
        default="the model's",
    )
    engine_seed: int | None = _flag("Seed of the sampler for requests that bring none.", "seed")
    generation_config: str | None = _flag(
        "Sampling values for what a request leaves out (temperature, top_p, top_k, min_p, "
        "repetition_penalty): auto (the model's recommended ones, from generation_config.json or a "
        "GGUF's general.sampling.*), none (OpenAI's: temperature 1, top_p 1; vllm is the same) or a "
        "folder holding a generation_config.json (vLLM's option).",
    )
    vram_budget: str | None = _flag(
        "Hard ceiling for everything on the GPU, e.g. 16GiB (at least 256MiB).",
        "vram_budget_bytes",
        default="none, --gpu-memory-utilization of the card",
        parse=parse_size,
    )
    gpu_memory_utilization: float | None = _flag("Fraction of the card to use when no --vram-budget.")
    cpu_offload_gb: float | None = _flag(
        "GiB of weights kept in pinned RAM as whole layers, copied to the GPU one layer ahead "
        "(vLLM's option; CUDA, dense weights).",
        default="0",
    )
    kv_cache_memory: str | None = _flag(
        "Fixed GPU-tier KV cache size, e.g. 8GiB, instead of sizing it from memory.",
        "kv_cache_memory_bytes",
        default="sized from memory",
        parse=parse_size,
    )
    num_kv_blocks: int | None = _flag(
        "Exact GPU-tier KV blocks; overrides --kv-cache-memory (for tests).", default="sized from memory"
    )
    cpu_kv_budget: str | None = _flag(
        "Pinned host RAM for cold KV, e.g. 32GiB; 0: no cpu tier.",
        "cpu_kv_budget_bytes",
        default="sized by --mode from the available RAM: in default mode what the context needs past the "
        "GPU, at most --cpu-kv-ram-share of it",
        parse=parse_size,
    )
    cpu_kv_ram_share: float | None = _flag(
        "The most of the available RAM an automatic cpu tier (no --cpu-kv-budget) takes, e.g. 0.3.",
        default="0.5; 0.8 with --mode extreme",
    )
    disk_kv_budget: str | None = _flag(
        "Disk space for colder KV (memory-mapped files), e.g. 200GiB; 0: no disk tier.",
        "disk_kv_budget_bytes",
        default="sized by --mode: none in default mode; extended: what RAM cannot hold; extreme: 1/4 of the "
        "free disk",
        parse=parse_size,
    )
    kv_disk_dir: str | None = _flag("Directory of the disk KV tier.", default="a temporary directory")
    kv_persist_dir: str | None = _flag(
        "Keep prefix KV blocks in files here, found again after a restart (docs/prefix_cache.md).",
        default="none, nothing persisted",
    )
    kv_persist_budget: str | None = _flag(
        "Most disk space of --kv-persist-dir, e.g. 100GiB (least recently used files go first).",
        "kv_persist_budget_bytes",
        default="64GiB",
        parse=parse_size,
    )
    kv_pin_share: float | None = _flag(
        "The most of each KV tier (gpu, cpu, disk) that prefixes pinned through /v1/kv/pin may hold, e.g. 0.5."
    )
    num_cpu_kv_blocks: int | None = _flag(
        "Exact cpu-tier KV blocks; overrides --cpu-kv-budget (for tests).", default="from --cpu-kv-budget"
    )
    num_disk_kv_blocks: int | None = _flag(
        "Exact disk-tier KV blocks; overrides --disk-kv-budget (for tests).", default="from --disk-kv-budget"
    )
    num_sink_blocks: int | None = _flag("First KV blocks of each sequence that never leave the GPU tier.")
    hot_window_tokens: str | None = _flag(
        "Most recent tokens of each sequence kept on the GPU tier, e.g. 1024 or 1K.", parse=parse_tokens
    )
    context_shift: bool | None = _flag(
        "At --max-model-len keep the sink blocks and the most recent tokens, drop the middle, turn the "
        "kept keys to their new positions and go on generating (llama.cpp's); a request's "
        "context_shift overrides it. Needs every KV block on the GPU tier (no cpu or disk tier).",
        default="off",
    )
    context_shift_keep: str | None = _flag(
        "With context shift: recent tokens each shift keeps, e.g. 2048 or 2K.",
        default="half of the context after the sink blocks",
        parse=parse_tokens,
    )
    context_shift_overlap: str | None = _flag(
        "With context shift: of the kept recent tokens, the last N are computed again at their new "
        "positions instead of turned (their KV then sees only the kept context).",
        default="0",
        parse=parse_tokens,
    )
    attention: str | None = _flag(
        "auto: GPU tier plus cold tiers; cpu: all KV in RAM (--cpu-kv-budget), decode attention on "
        "the CPU; on a GPU the newest block of each sequence and one prefill chunk stay on it, and "
        "prefill attention streams the KV to the GPU."
    )
    cold_attention: str | None = _flag(
        "Attention over cold blocks: cpu (in RAM), stream (to the GPU), split (both at once) or auto, "
        "all exact; auto on a GPU is split where `kvspill doctor --calibrate` measured the CPU at half "
        "the stream's rate or more, else stream; sparse: decode rows attend only the cold blocks their "
        "queries select (--sparse-budget-tokens); auto is sparse with --mode extreme."
    )
    sparse_budget_tokens: str | None = _flag(
        "With --cold-attention sparse: cold tokens each decode step attends per layer, e.g. 4096 or 4K.",
        parse=parse_tokens,
    )
    sparse_cache_seqs: int | None = _flag(
        "With --cold-attention sparse: decode requests whose chosen cold blocks stay on the GPU "
        "between steps (each costs the budget's KV bytes there); 0 copies every step's choice.",
        default="1",
    )
    sparse_prompt_window: str | None = _flag(
        "With --cold-attention sparse: the queries of each prompt's last N tokens (the question) choose "
        "--sparse-prompt-share of the budget, the step's query the rest; 0 turns it off.",
        parse=parse_tokens,
    )
    sparse_prompt_share: float | None = _flag(
        "With --sparse-prompt-window: the share of --sparse-budget-tokens the prompt's queries choose."
    )
    cpu_attention_threads: int | None = _flag(
        "Threads (each pinned to its own core where allowed) for CPU attention.", default="torch's default"
    )
    kv_cache_dtype: str | None = _flag(
        "KV cache format: auto (the model's dtype), fp8 (= fp8_e4m3), fp8_e5m2, or int8 (a scale per token "
        "and kv head; passes the quality gate where fp8 does not): about half the bytes of bf16 KV."
    )
    kv_cache_dtype_skip_layers: str | None = _flag(
        "Layers whose KV keeps the model dtype under --kv-cache-dtype, e.g. 0,10,23 (the layers that "
        "fail the quality gate: python -m kvspill.bench.kv_quality --per-layer measures each).",
        default="none",
        parse=lambda text, flag: parse_layer_list(text),
    )
    tensor_parallel_size: int | None = _flag(
        "GPUs to split the model over (one process each; gloo processes on cpu): attention heads, "
        "KV heads and every KV tier are split across them.",
        default="1",
    )

    def given(self) -> dict[str, Any]:
        """The flags given, by flag field name, as typed (sizes still text)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


_FIELDS = {f.name: f for f in fields(EngineOptions)}


def flag_meta(name: str) -> Any:
    """What `_flag` recorded for flag field `name`: its "what", "config", "default" and "parse"."""
    return _FIELDS[name].metadata


def option_names() -> list[str]:
    """Every flag field name, in declaration order (the order help and docs list them)."""
    return list(_FIELDS)


def config_field(name: str) -> str:
    """The EngineConfig field that flag field `name` sets."""
    return flag_meta(name)["config"] or name


def flag_name(name: str) -> str:
    """`vram_budget` -> `--vram-budget`."""
    return "--" + name.replace("_", "-")


def engine_kwargs(options: EngineOptions) -> dict[str, Any]:
    """EngineConfig keyword arguments for the flags given (parsed, not yet validated)."""
    out = {}
    for name, value in options.given().items():
        parse = flag_meta(name)["parse"]
        out[config_field(name)] = parse(value, flag_name(name)) if parse else value
    return out


def python_engine_kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """EngineConfig keyword arguments as the Python API (`LLM(model, **kwargs)`) takes them: the
    text a flag takes is read as the flag reads it, for the field the flag sets
    (max_model_len="16K", rope_scaling="yarn:4", cpu_kv_budget_bytes="32GiB"); other values
    as they are, for EngineConfig to check."""
    out = dict(kwargs)
    for name in option_names():
        parse, field_name = flag_meta(name)["parse"], config_field(name)
        if parse is not None and isinstance(out.get(field_name), str):
            out[field_name] = parse(out[field_name], field_name)
    return out


def engine_config(options: EngineOptions, model: str | None = None) -> EngineConfig:
    """The frozen, validated engine config of `model` with these flags (raises InvalidParameterError)."""
    return EngineConfig(model=model, **engine_kwargs(options))


def env_var(name: str) -> str:
    """`vram_budget` -> `KVSPILL_VRAM_BUDGET`, the environment variable that also sets the flag."""
    return f"KVSPILL_{name.upper()}"


def default_text(name: str) -> str:
    """Flag field `name`'s default in words: as given to `_flag`, else EngineConfig's value."""
    given = flag_meta(name)["default"]
    if given is not None:
        return str(given)
    default = EngineConfig.__dataclass_fields__[config_field(name)].default
    if default is MISSING or default is None:
        raise TypeError(f"engine flag {name}: say its default in words (_flag(default=...))")
    return str(default)

"""Engine configuration: what the user asked for, frozen and validated.

Nothing measured at start-up (free memory, number of KV blocks, bandwidths) is written back
here: that goes into the runtime plan. Every invalid value raises `InvalidParameterError`
with a message that says what to change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kvspill.errors import InvalidParameterError
from kvspill.modes import MODE_NAMES, MODES

DTYPES = ("auto", "float32", "float16", "bfloat16")
KV_CACHE_DTYPES = (
    "auto",
    "fp8",
    "fp8_e4m3",
    "fp8_e5m2",
    "int8",
)  # kernels/kv_quant.py (config stays torch-free)
DEVICES = ("auto", "cpu", "cuda")
# --generation-config: the model's sampling values, or none (vLLM's "vllm" too); else a folder
GENERATION_CONFIGS_OFF = ("none", "vllm")
GENERATION_CONFIGS = ("auto", *GENERATION_CONFIGS_OFF)
QUANTIZATIONS = (None, "none", "gguf", "fp8", "awq", "gptq")
# Every rope_type transformers knows (ROPE_INIT_FUNCTIONS), plus "default".
ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3", "longrope")
# A sparse budget of fewer blocks of 16 than this gets 8-token blocks by default
# (`default_block_size`).
SPARSE_MIN_BLOCKS = 64


def parse_rope_scaling(text: str) -> dict[str, Any]:
    """Parse `--rope-scaling` as `TYPE:FACTOR` (e.g. `yarn:4`) or a JSON object."""
    import json

    text = text.strip()
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise InvalidParameterError("rope_scaling", f"--rope-scaling is not valid JSON: {e}") from e
        if not isinstance(value, dict):
            raise InvalidParameterError("rope_scaling", "--rope-scaling JSON must be an object")
        return value
    rope_type, _, factor = text.partition(":")
    if not factor and rope_type not in ("default", "none"):
        raise InvalidParameterError(
            "rope_scaling",
            f"--rope-scaling {text!r} has no factor: write TYPE:FACTOR such as {rope_type or 'yarn'}:4 "
            "(the context grows by FACTOR)",
        )
    try:
        return {"rope_type": rope_type, "factor": float(factor or "1")}
    except ValueError as e:
        raise InvalidParameterError(
            "rope_scaling", f"--rope-scaling expects TYPE:FACTOR such as yarn:4, got {text!r}"
        ) from e


def parse_layer_list(text: Any) -> tuple[int, ...]:
    """`--kv-cache-dtype-skip-layers`: layer indices as "0,10,23" (or a list, from a config file
    or the Python API), sorted, each once."""
    items = text.replace(" ", "").split(",") if isinstance(text, str) else list(text)
    try:
        layers = {int(x) for x in items if x != ""}
    except (TypeError, ValueError) as e:
        raise InvalidParameterError(
            "kv_cache_dtype_skip_layers",
            f"--kv-cache-dtype-skip-layers takes layer indices such as 0,10,23, got {text!r}",
        ) from e
    if any(layer < 0 for layer in layers):
        raise InvalidParameterError(
            "kv_cache_dtype_skip_layers",
            f"--kv-cache-dtype-skip-layers: layer indices start at 0, got {text!r}",
        )
    return tuple(sorted(layers))


# --cold-attention's values: "auto" and one per cold path (plan.choices.ColdPath; a test holds
# them equal, tests/plan/test_choices_agree.py). Here, at the bottom, because the config checks it.
COLD_ATTENTION = ("auto", "cpu", "stream", "split", "sparse")


def sparse_cache_groups(cold_attention: str, max_num_seqs: int, sparse_cache_seqs: int) -> int:
    """Sequences the sparse block cache holds (`attention/sparse/cache.py`): 0 unless sparse. The engine
    and `kvspill plan` (from its flags alone) both size it here."""
    return min(max_num_seqs, sparse_cache_seqs) if cold_attention == "sparse" else 0


def rope_type_of(rope_scaling: Mapping[str, Any] | None) -> str | None:
    """The type a --rope-scaling override names ("rope_type", or transformers' older "type");
    None when there is no override."""
    return None if rope_scaling is None else rope_scaling.get("rope_type", rope_scaling.get("type"))


def default_block_size(cold_attention: str, sparse_budget_tokens: int) -> int:
    """Tokens per KV block when `--block-size` is not given: 16, or 8 with `--cold-attention
    sparse` and a budget under `SPARSE_MIN_BLOCKS` blocks of 16 (1,024 tokens).

    Sparse selection keeps whole blocks, and a budget of a few blocks covers few places in the
    context. SmolLM2's code task at 1/8 of the context, against exact:
    - 16 blocks of 16 (256 tokens, 2K): 4-5 points under;
    - 32 blocks of 8 (2K): 1.8 under over 600 samples (H200);
    - 32 blocks of 16 (512 tokens, 4K): even on 20 GPU samples, 6.3 under on 32 CPU ones.
    Budgets of 1,024 tokens and more keep 16: 8-token blocks there cost ~8% of decode speed and
    twice the summaries (bench/results/2026-11-29-h200-block-size-limits/, docs/eval.md)."""
    if cold_attention == "sparse" and sparse_budget_tokens < SPARSE_MIN_BLOCKS * 16:
        return 8
    return 16


@dataclass(frozen=True)
class EngineConfig:
    model: str | None = None  # None: the embedded SmolLM2-135M-Instruct
    # default | extended | extreme (kvspill/modes.py): the context and the tiers where no flag sets them
    mode: str = "default"
    device: str = "auto"  # auto: cuda when available, else cpu
    dtype: str = "auto"  # auto: bfloat16 on cuda; on the cpu float16 or float32, measured (plan/cpu_dtype.py)
    max_model_len: int | None = None  # None: the model's max_position_embeddings (after rope scaling)
    block_size: int = 0  # 0: `default_block_size` (16, or 8 for a small sparse budget)
    max_num_batched_tokens: int = 2048  # per-step token budget (prefill chunk size)
    max_num_seqs: int = 64
    num_kv_blocks: int | None = None  # None: sized from memory at start-up
    gpu_memory_utilization: float = 0.90  # fraction of the card for everything (when no budget)
    kv_cache_memory_bytes: int | None = None  # fixed KV cache size instead of sizing from memory
    enable_prefix_caching: bool = True
    # vLLM's skip_tokenizer_init: load no tokenizer (requests send token ids; eos from config.json)
    skip_tokenizer_init: bool = False
    # Weight format (vLLM's --quantization): None = the file's own (a GGUF stays in its quantized
    # blocks on CUDA, and on an AVX-512 CPU where g++ builds the CPU GGUF kernel; else dequantized);
    # "gguf" = keep a GGUF quantized on any device; "none" = dequantize to --dtype at load;
    # "fp8" = the decoder layers' projections in float8_e4m3 with per-row scales (model/fp8.py);
    # "awq" / "gptq" = an int4 checkpoint of that format (its own format is read anyway; naming it
    # checks it), run as Q4_1 blocks through the GGUF kernels (model/int4_checkpoints.py).
    quantization: str | None = None
    # GiB of weights kept in pinned RAM as whole layers, copied to the GPU one layer ahead
    # (vLLM's --cpu-offload-gb; model/offload.py). CUDA only; dense weights only.
    cpu_offload_gb: float = 0.0
    rope_scaling: dict[str, Any] | None = None  # override, e.g. {"rope_type": "yarn", "factor": 4}
    enforce_eager: bool = False  # True: no CUDA graphs
    # Launch step N+1 before reading step N's tokens (engine/core.py); None: on with CUDA, off on the CPU.
    async_scheduling: bool | None = None
    # Run a few throwaway requests before the engine is ready, so the first user request does not
    # pay for kernel compiles (engine/warmup.py); None: on with CUDA, off on the CPU.
    kernel_warmup: bool | None = None
    # While requests decode, cap each step's prefill tokens so the step stays near this many ms
    # (engine/itl_budget.py). None: on with CUDA with an automatic target, off on the CPU; 0: off.
    target_itl_ms: float | None = None
    seed: int = 0
    chat_template: str | None = None  # a Jinja chat template file used instead of the model's
    # The tokenizer (and its chat template) of another directory, .gguf file or cached Hugging Face
    # id instead of the model's own (vLLM's --tokenizer; model/resolve.resolve_tokenizer)
    tokenizer: str | None = None
    # Sampling values for what a request leaves out (vLLM's --generation-config): "auto" = the
    # model's recommended ones (generation_config.json, GGUF general.sampling.*), "none" (or "vllm")
    # = OpenAI's, or a folder holding a generation_config.json (text/sampling_defaults.py)
    generation_config: str = "auto"
    trust_remote_code: bool = False  # never executes model code; kept False (documented)
    # ---- KV tiers (docs/architecture.md, "KV tiers") ----
    vram_budget_bytes: int | None = None  # hard ceiling for everything on the GPU (--vram-budget)
    # pinned host pool for cold KV (--cpu-kv-budget); 0 = no cpu tier; None = the mode sizes it
    # from the available RAM (plan/fit.py: on a GPU, what the context needs past the GPU share)
    cpu_kv_budget_bytes: int | None = None
    # the most of the available RAM an automatic cpu tier takes (None: the mode's share)
    cpu_kv_ram_share: float | None = None
    # a file of colder KV, explicit I/O (--disk-kv-budget); 0 = none; None = the mode sizes it
    disk_kv_budget_bytes: int | None = None
    kv_disk_dir: str | None = None  # where the disk tier lives (default: a temp dir)
    kv_persist_dir: str | None = None  # prefix KV blocks kept in files across restarts (storage/persist.py)
    kv_persist_budget_bytes: int = 64 * 2**30  # most bytes of block files there (LRU beyond)
    kv_pin_share: float = 0.5  # the most of each tier that pinned prefixes hold (kv/prefix_control.py)
    num_cpu_kv_blocks: int | None = None  # exact cpu-tier size in blocks (tests); overrides the budget
    num_disk_kv_blocks: int | None = None  # exact disk-tier size in blocks (tests); overrides the budget
    num_sink_blocks: int = 1  # first blocks of each sequence that never leave the gpu tier
    hot_window_tokens: int = 1024  # most recent tokens of each sequence that stay on the gpu tier
    # llama.cpp's --context-shift: a sequence at max_model_len keeps its sink blocks and its most
    # recent tokens, drops the middle and goes on (scheduler/context_shift.py); off by default
    context_shift: bool = False
    context_shift_keep: int = 0  # recent tokens each shift keeps (0: half of what follows the sinks)
    context_shift_overlap: int = 0  # of those, the last ones computed again instead of turned
    # "auto": gpu tier + cold tiers; "cpu": all KV in RAM, decode attention on the CPU (on a GPU
    # through the tiers: `with_attention_mode`)
    attention: str = "auto"
    # cold blocks: "cpu" (attend in RAM), "stream" (to the GPU), "split", "auto" (exact), or "sparse":
    # decode rows attend only the cold blocks their queries select (attention/cold/sparse.py)
    cold_attention: str = "auto"
    sparse_budget_tokens: int = 4096  # sparse: cold tokens a decode row attends per layer
    # sparse: decode requests whose chosen cold blocks stay on the GPU between steps (each costs
    # the budget's KV bytes there, counted by the plan); 0: every step copies its choice
    sparse_cache_seqs: int = 1
    # sparse: the queries of each prompt's last `sparse_prompt_window` tokens choose
    # `sparse_prompt_share` of the budget (attention/sparse/anchor.py); 0: the step's query chooses all
    sparse_prompt_window: int = 0
    sparse_prompt_share: float = 0.5
    cpu_attention_threads: int | None = (
        None  # threads (and cores, where affinity is allowed) for CPU attention
    )
    # KV pool format (vLLM's --kv-cache-dtype): "auto" = the model dtype; "fp8"/"fp8_e4m3"/"fp8_e5m2"
    # store K and V in 8 bits, "int8" in 8 bits plus a scale per token and kv head
    # (kernels/kv_quant.py): about half the bytes of every tier against bf16.
    kv_cache_dtype: str = "auto"
    # Layers whose K and V keep the model dtype under a quantized kv_cache_dtype (a mixed pool,
    # storage/layout.py): the ones that fail the quality gate (`python -m kvspill.bench.kv_quality
    # --per-layer` measures each layer's error).
    kv_cache_dtype_skip_layers: tuple[int, ...] = ()
    # ---- past one GPU (docs/distributed.md) ----
    # vLLM's --tensor-parallel-size: one process per GPU (gloo processes on the CPU), Megatron
    # splits of every layer, KV heads (and so every KV tier) split across the ranks.
    tensor_parallel_size: int = 1

    def sparse_cache_groups(self) -> int:
        """Sequences the sparse block cache holds (`attention/sparse/cache.py`): 0 unless sparse."""
        return sparse_cache_groups(self.cold_attention, self.max_num_seqs, self.sparse_cache_seqs)

    def __post_init__(self) -> None:
        def bad(param: str, msg: str) -> InvalidParameterError:
            return InvalidParameterError(param, msg)

        if self.device not in DEVICES and not self.device.startswith("cuda:"):
            raise bad("device", f"--device must be one of {DEVICES} or cuda:N, got {self.device!r}")
        if self.dtype not in DTYPES:
            raise bad("dtype", f"--dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.mode not in MODE_NAMES:
            raise bad("mode", f"--mode must be one of {', '.join(MODE_NAMES)}, got {self.mode!r}")
        if (
            self.generation_config not in GENERATION_CONFIGS
            and not (Path(self.generation_config) / "generation_config.json").is_file()
        ):
            raise bad(
                "generation_config",
                f"--generation-config must be auto, none or a folder holding generation_config.json; "
                f"{self.generation_config!r} is none of them",
            )
        if self.cold_attention == "auto" and self.attention == "auto":  # extreme: auto is sparse
            object.__setattr__(self, "cold_attention", MODES[self.mode].auto_cold_attention)
        if self.block_size == 0:
            object.__setattr__(
                self, "block_size", default_block_size(self.cold_attention, self.sparse_budget_tokens)
            )
        if self.block_size not in (8, 16, 32, 64, 128):
            raise bad("block_size", f"--block-size must be 8, 16, 32, 64 or 128, got {self.block_size}")
        if self.max_model_len is not None and (
            not isinstance(self.max_model_len, int) or isinstance(self.max_model_len, bool)
        ):
            raise bad(
                "max_model_len",
                f"max_model_len is a token count: an int such as 16384 (LLM() also takes the command "
                f"line's text, e.g. '16K'), got {self.max_model_len!r}",
            )
        if self.max_model_len is not None and self.max_model_len < 16:
            raise bad("max_model_len", f"--max-model-len must be at least 16, got {self.max_model_len}")
        if self.max_num_batched_tokens < 1:
            raise bad(
                "max_num_batched_tokens",
                f"--max-num-batched-tokens must be at least 1, got {self.max_num_batched_tokens}",
            )
        if self.target_itl_ms is not None and not (self.target_itl_ms >= 0):
            raise bad(
                "target_itl_ms", f"--target-itl-ms must be 0 (off) or positive, got {self.target_itl_ms}"
            )
        if self.max_num_seqs < 1:
            raise bad("max_num_seqs", f"--max-num-seqs must be at least 1, got {self.max_num_seqs}")
        if not (0.05 <= self.gpu_memory_utilization <= 1.0):
            raise bad(
                "gpu_memory_utilization",
                f"--gpu-memory-utilization must be in [0.05, 1.0], got {self.gpu_memory_utilization}",
            )
        self._check_kv()
        self._check_weights()
        self._check_tensor_parallel()
        if self.trust_remote_code:
            raise bad("trust_remote_code", "kvspill never runs model code from a repository")

    def _check_kv(self) -> None:
        """The KV tiers, RoPE scaling, cold attention and the KV format."""
        bad = InvalidParameterError
        if self.num_kv_blocks is not None and self.num_kv_blocks < 2:
            raise bad("num_kv_blocks", f"num_kv_blocks must be at least 2, got {self.num_kv_blocks}")
        if self.rope_scaling is not None and not isinstance(self.rope_scaling, Mapping):
            raise bad(
                "rope_scaling",
                "rope_scaling is a dict such as {'rope_type': 'yarn', 'factor': 4.0} (LLM() also takes the "
                f"command line's TYPE:FACTOR or JSON text, e.g. 'yarn:4'), got {self.rope_scaling!r}",
            )
        if self.rope_scaling is not None:
            rope_type = rope_type_of(self.rope_scaling)
            if rope_type not in ROPE_TYPES:
                raise bad("rope_scaling", f"rope_type must be one of {ROPE_TYPES}, got {rope_type!r}")
            factor = self.rope_scaling.get("factor", 1.0)
            if not isinstance(factor, (int, float)) or factor < 1.0:
                raise bad("rope_scaling", f"rope scaling factor must be >= 1, got {factor!r}")
        share = self.cpu_kv_ram_share
        if share is not None and not 0.0 < share <= 0.95:
            raise bad("cpu_kv_ram_share", f"--cpu-kv-ram-share must be in (0, 0.95], got {share}")
        if not 0.0 <= self.kv_pin_share <= 1.0:
            raise bad("kv_pin_share", f"--kv-pin-share must be in [0, 1], got {self.kv_pin_share}")
        for name in ("cpu_kv_budget_bytes", "disk_kv_budget_bytes", "kv_persist_budget_bytes"):
            if (getattr(self, name) or 0) < 0:
                raise bad(name, f"--{name.removesuffix('_bytes').replace('_', '-')} must not be negative")
        if self.vram_budget_bytes is not None and self.vram_budget_bytes < 2**28:
            raise bad(
                "vram_budget", f"--vram-budget must be at least 256MiB, got {self.vram_budget_bytes} bytes"
            )
        if self.num_sink_blocks < 0 or self.hot_window_tokens < 0:
            raise bad("num_sink_blocks", "--num-sink-blocks and --hot-window-tokens must not be negative")
        if self.context_shift_keep < 0 or self.context_shift_overlap < 0:
            raise bad(
                "context_shift_keep", "--context-shift-keep and --context-shift-overlap must not be negative"
            )
        if self.context_shift:
            self._check_context_shift()
        self._check_cold_attention()
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise bad(
                "kv_cache_dtype",
                f"--kv-cache-dtype must be one of {KV_CACHE_DTYPES}, got {self.kv_cache_dtype!r}",
            )
        skip = parse_layer_list(self.kv_cache_dtype_skip_layers)
        object.__setattr__(self, "kv_cache_dtype_skip_layers", skip)  # a tuple, sorted, each once
        if skip and self.kv_cache_dtype == "auto":
            raise bad(
                "kv_cache_dtype_skip_layers",
                "--kv-cache-dtype-skip-layers keeps layers out of a quantized --kv-cache-dtype; with auto "
                "every layer holds the model dtype already: pass --kv-cache-dtype fp8 or int8, or drop it",
            )
        if self.attention not in ("auto", "cpu"):
            raise bad("attention", f"--attention must be auto or cpu, got {self.attention!r}")

    def _check_context_shift(self) -> None:
        """--context-shift turns kept keys in the GPU tier only (scheduler/context_shift.py): no flag
        may ask for a cold tier. One the default mode adds by itself is refused at start-up."""
        cold = [
            flag
            for flag, on in (
                ("--cpu-kv-budget", bool(self.cpu_kv_budget_bytes)),
                ("--disk-kv-budget", bool(self.disk_kv_budget_bytes)),
                ("--num-cpu-kv-blocks", bool(self.num_cpu_kv_blocks)),
                ("--num-disk-kv-blocks", bool(self.num_disk_kv_blocks)),
                ("--attention cpu", self.attention == "cpu"),
                (f"--mode {self.mode}", self.mode != "default"),
            )
            if on
        ]
        if cold:
            raise InvalidParameterError(
                "context_shift",
                f"--context-shift needs all KV in the GPU tier, but {', '.join(cold)} asks for cold KV "
                "tiers: drop it (or set the budget to 0), or drop --context-shift",
            )

    def _check_cold_attention(self) -> None:
        """--cold-attention and the sparse path's knobs."""
        bad = InvalidParameterError
        if self.cold_attention not in COLD_ATTENTION:
            raise bad(
                "cold_attention",
                f"--cold-attention must be {', '.join(COLD_ATTENTION[:-1])} or {COLD_ATTENTION[-1]}, "
                f"got {self.cold_attention!r}",
            )
        if self.sparse_budget_tokens < self.block_size:
            raise bad(
                "sparse_budget_tokens",
                f"--sparse-budget-tokens must be at least one block ({self.block_size} tokens), "
                f"got {self.sparse_budget_tokens}",
            )
        if self.sparse_prompt_window < 0:
            raise bad(
                "sparse_prompt_window",
                f"--sparse-prompt-window must not be negative (0 turns it off), got {self.sparse_prompt_window}",
            )
        if not 0.0 <= self.sparse_prompt_share <= 1.0:
            raise bad(
                "sparse_prompt_share",
                f"--sparse-prompt-share must be between 0 and 1, got {self.sparse_prompt_share}",
            )
        if self.sparse_cache_seqs < 0:
            raise bad(
                "sparse_cache_seqs", f"--sparse-cache-seqs must not be negative, got {self.sparse_cache_seqs}"
            )
        if self.cpu_attention_threads is not None and self.cpu_attention_threads < 1:
            raise bad("cpu_attention_threads", "--cpu-attention-threads must be at least 1")

    def _check_weights(self) -> None:
        """How the weights are held: --quantization and --cpu-offload-gb."""
        bad = InvalidParameterError
        if self.quantization not in QUANTIZATIONS:
            raise bad(
                "quantization",
                f"--quantization must be one of {', '.join(str(q) for q in QUANTIZATIONS[1:])} "
                f"(or unset: the model file's own format), got {self.quantization!r}",
            )
        if self.quantization == "fp8" and self.cpu_offload_gb:
            raise bad(
                "cpu_offload_gb", "--cpu-offload-gb moves dense weights: drop it with --quantization fp8"
            )
        if self.cpu_offload_gb < 0:
            raise bad("cpu_offload_gb", f"--cpu-offload-gb must not be negative, got {self.cpu_offload_gb}")

    def _check_tensor_parallel(self) -> None:
        """Combinations tensor parallelism does not run (yet), refused with what to change."""
        n = self.tensor_parallel_size
        if not isinstance(n, int) or not 1 <= n <= 64:
            raise InvalidParameterError(
                "tensor_parallel_size", f"--tensor-parallel-size must be an int from 1 to 64, got {n!r}"
            )
        if n == 1:
            return
        if self.device.startswith("cuda:"):
            raise InvalidParameterError(
                "tensor_parallel_size",
                f"--device {self.device} names one GPU; with --tensor-parallel-size {n} rank r runs on "
                "cuda:r: pick the GPUs with CUDA_VISIBLE_DEVICES and pass --device cuda",
            )
        refused = {
            "attention": self.attention == "cpu",
            "cpu_offload_gb": self.cpu_offload_gb > 0,
            # the persister writes rank 0's blocks only (the other ranks hold other KV heads)
            "kv_persist_dir": self.kv_persist_dir is not None,
        }
        for param, bad in refused.items():
            if bad:
                raise InvalidParameterError(
                    param,
                    f"--{param.replace('_', '-')} does not run with --tensor-parallel-size {n} yet: "
                    "drop one of them",
                )


def cpu_attention_gpu_blocks(config: EngineConfig) -> int:
    """The gpu tier of `--attention cpu` on a GPU: each sequence's sink blocks and the two newest
    blocks (the one being written and the one before), one prefill chunk's blocks, two spare."""
    bs = config.block_size
    return config.max_num_seqs * (config.num_sink_blocks + 2) + -(-config.max_num_batched_tokens // bs) + 2


def with_attention_mode(config: EngineConfig, device_type: str) -> EngineConfig:
    """`--attention cpu` on a CUDA device, in terms of the tiers: the KV lives in the cpu tier
    (its size from `--cpu-kv-budget`, else the plan's host pool), the gpu tier keeps only what the
    store kernels write (`cpu_attention_gpu_blocks`; `--hot-window-tokens` is one block), and
    decode rows attend their cold blocks on the CPU (`--cold-attention cpu`). A prefill chunk's
    attention over the cold blocks stays on the GPU, streamed: it is compute-bound (thousands of
    queries per key), which the CPU cannot serve (attention/cold/dispatch.py). On the CPU device the
    whole pool is in RAM already: nothing changes. A config that already went through this
    comes back unchanged."""
    if config.attention != "cpu" or device_type != "cuda":
        return config
    if config.cold_attention not in ("auto", "cpu"):
        raise InvalidParameterError(
            "cold_attention",
            f"--attention cpu attends over the KV in RAM on the CPU; --cold-attention "
            f"{config.cold_attention} asks for another path: drop one of the two",
        )
    return replace(
        config,
        cold_attention="cpu",
        hot_window_tokens=config.block_size,
        num_kv_blocks=config.num_kv_blocks or cpu_attention_gpu_blocks(config),
    )


def block_size_of(flags: Mapping[str, Any]) -> int:
    """The block size an engine of these EngineConfig keyword arguments will take: the given
    `block_size`, else `default_block_size` of its cold attention and sparse budget (for commands
    that size things before the engine exists: `kvspill eval`, `kvspill plan`)."""
    return int(
        flags.get("block_size")
        or default_block_size(
            flags.get("cold_attention", EngineConfig.cold_attention),
            int(flags.get("sparse_budget_tokens", EngineConfig.sparse_budget_tokens)),
        )
    )

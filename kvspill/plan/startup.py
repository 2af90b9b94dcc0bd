"""The engine's memory plan: printed before loading, and the one that sizes the KV pools after.

One function, `startup_plan`, is the source of both: before loading it plans from the model's
shapes (config.json, GGUF header or a benchmark shape) like `kvspill plan`; after loading the
engine passes what it measured (weights on the device, the profiled activation peak, memory in
use outside torch) as `Measured`, and the same arithmetic (`plan.arithmetic.compute_plan`) gives
the gpu/cpu/disk tiers the engine allocates, block for block. Bandwidths come from the saved
calibration, the card's known figures, or documented defaults. On CUDA a plan that cannot hold
one sequence of `max_model_len` stops start-up with the planner's advice; on the CPU it informs.

Budgets by device (what the engine's pools may use):
- cuda: `--vram-budget` is the ceiling itself; without one, `--gpu-memory-utilization` of the card
  (`plan.choices.vram_budget`, the rule the engine's allocator cap and the record's ceiling follow).
- cpu: the "gpu" tier is host RAM. `--vram-budget` bounds it the same way; without one the pool
  holds up to 8 sequences of `max_model_len` within a quarter of the available RAM.
- `--attention cpu` on cuda (`config.with_attention_mode`): the gpu tier holds only what the
  store kernels write; the KV lives in the cpu tier, of `--cpu-kv-budget` or else sized like the
  cpu device's pool below. On the cpu device: one pool in RAM (`--cpu-kv-budget`, else as
  above), no cold tiers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from kvspill.config import EngineConfig, with_attention_mode
from kvspill.errors import InvalidParameterError, OutOfKVMemoryError
from kvspill.modes import MODES
from kvspill.plan import (
    Bandwidths,
    MemoryPlan,
    PlanRequest,
    format_plan_table,
    host_rates,
    make_plan,
    request_from_engine_config,
)
from kvspill.plan.choices import vram_budget
from kvspill.plan.fit import AutoTiers, HostRoom, fit_tiers, longest_context, mode_context
from kvspill.plan.host_rates import planning_rates
from kvspill.plan.spec import ModelSpec, random_weight_format
from kvspill.plan.weights import INT4_CHECKPOINT_METHODS

logger = logging.getLogger(__name__)

CPU_POOL_RAM_FRACTION = 4  # without a budget the CPU pool takes at most 1/4 of available RAM
CPU_POOL_MAX_SEQS = 8  # ... and no more than this many sequences of max_model_len


@dataclass(frozen=True)
class Measured:
    """What the engine measured after loading, on the device that holds the KV pool (bytes)."""

    weight_bytes: int  # the loaded model's tensors on that device
    activation_bytes: int | None = None  # peak of one profiled prefill chunk (CUDA); None: estimate
    runtime_bytes: int | None = None  # in use outside torch's tensors: CUDA context, other processes
    graph_scratch_bytes: int | None = None  # a weight dequantized inside a captured decode step (GGUF)
    scale_pair_bytes: int | None = None  # the Q4_K scale pairs among weight_bytes (None: not measured)


@dataclass(frozen=True)
class StartupPlan:
    plan: MemoryPlan
    bandwidths: Bandwidths
    table: str


def _weight_format(config: EngineConfig, device: str, spec: ModelSpec) -> str:
    """PlanRequest.quantization for this engine: a random model's GGUF type, the file's own, or dense."""
    random_format = random_weight_format(config.model)
    if random_format is not None:
        return random_format
    if config.quantization == "fp8":
        return "fp8"
    if spec.quant_method in INT4_CHECKPOINT_METHODS and config.quantization in (None, spec.quant_method):
        return spec.quant_method
    return "gguf" if keeps_gguf_quantized(config, device) else "none"


def keeps_gguf_quantized(config: EngineConfig, device: str) -> bool:
    """Whether a GGUF model's quantized tensors stay in their blocks (EngineConfig.quantization):
    by default on CUDA, and on the CPU where the CPU GGUF kernel can be built (g++ on PATH,
    kernels/cpu_gguf.py; without it torch would dequantize every weight at every call). On the CPU
    the kernel's decode reads a third of the dense fp16 bytes and its logits sit closer to the
    file's (bench/results/2026-12-07-cpu-gguf-gemv/)."""
    if config.quantization is not None:
        return config.quantization == "gguf"
    return device == "cuda" or (device == "cpu" and host_rates.cpu_keeps_gguf_blocks())


def _device_budget(
    config: EngineConfig,
    request: PlanRequest,
    device: str,
    device_total_bytes: int | None,
    host_available_bytes: int | None,
) -> PlanRequest | None:
    """`request` with the device pool's budget for `device` (module docstring); None: no budget known."""
    if device == "cuda":
        if config.attention == "cpu" and not config.cpu_kv_budget_bytes and config.num_cpu_kv_blocks is None:
            if host_available_bytes is None:
                return None
            request = replace(request, ram_budget_bytes=host_pool_bytes(request, host_available_bytes))
        budget = vram_budget(config.vram_budget_bytes, config.gpu_memory_utilization, device_total_bytes)
        if budget is None:
            return None
        return replace(request, vram_budget_bytes=budget[0], gpu_memory_utilization=budget[1])
    request = replace(request, device="cpu", gpu_memory_utilization=1.0)
    fixed = config.kv_cache_memory_bytes
    if config.attention == "cpu":  # on the cpu device: one pool in RAM, no cold tiers
        request = replace(
            request, ram_budget_bytes=0, disk_budget_bytes=0, cpu_kv_blocks=None, disk_kv_blocks=None,
            measured_weight_bytes=0, measured_activation_bytes=0,
        )  # fmt: skip
        fixed = config.cpu_kv_budget_bytes or fixed
    elif config.vram_budget_bytes is not None:
        return replace(request, vram_budget_bytes=config.vram_budget_bytes)
    if host_available_bytes is None:
        return None
    if fixed is None:
        fixed = host_pool_bytes(request, host_available_bytes)
    return replace(request, vram_budget_bytes=max(1, host_available_bytes), gpu_kv_budget_bytes=fixed)


def host_pool_bytes(request: PlanRequest, host_available_bytes: int) -> int:
    """A KV pool in host RAM without a budget: up to CPU_POOL_MAX_SEQS sequences of the context,
    within 1/CPU_POOL_RAM_FRACTION of the available RAM."""
    block_bytes = request.kv_bytes_per_token * request.block_size
    blocks_per_seq = -(-request.context_len // request.block_size)
    want = blocks_per_seq * min(request.max_num_seqs, CPU_POOL_MAX_SEQS) * block_bytes
    return min(want, host_available_bytes // CPU_POOL_RAM_FRACTION)


def auto_tiers(config: EngineConfig, device: str) -> AutoTiers:
    """The tiers `config`'s mode sizes on `device`: those the user gave no size for. On the CPU
    device the pool is in RAM already (no cpu tier); `--attention cpu` sizes its own RAM pool."""
    cpu = config.cpu_kv_budget_bytes is None and config.num_cpu_kv_blocks is None
    disk = config.disk_kv_budget_bytes is None and config.num_disk_kv_blocks is None
    in_ram = config.attention == "cpu"
    return AutoTiers(
        cpu=cpu and device == "cuda" and not in_ram,
        disk=disk and not (in_ram and device != "cuda"),
        ram_share=config.cpu_kv_ram_share,
    )


def _plan_request(
    config: EngineConfig,
    spec: ModelSpec,
    device: str,
    device_total_bytes: int | None,
    room: HostRoom,
    measured: Measured | None,
    context_len: int | None,
) -> PlanRequest | None:
    """The request of this engine before its mode sizes the tiers; None: no device budget known."""
    request = request_from_engine_config(
        config,
        spec,
        vram_budget_bytes=1,  # set by _device_budget
        ram_budget_bytes=config.cpu_kv_budget_bytes or 0,
        disk_budget_bytes=config.disk_kv_budget_bytes or 0,
    )
    request = replace(
        request,
        context_len=context_len or request.context_len,
        rope_positions=context_len or request.rope_positions,  # the loaded model's table
        quantization=_weight_format(config, device, spec),
        gpu_kv_blocks=config.num_kv_blocks,
        cpu_kv_blocks=config.num_cpu_kv_blocks,
        disk_kv_blocks=config.num_disk_kv_blocks,
    )
    if measured is not None:
        request = replace(
            request,
            measured_weight_bytes=measured.weight_bytes,
            measured_activation_bytes=measured.activation_bytes,
            measured_runtime_bytes=measured.runtime_bytes,
            graph_scratch_bytes=measured.graph_scratch_bytes,
            measured_scale_pair_bytes=measured.scale_pair_bytes,
        )
    return _device_budget(config, request, device, device_total_bytes, room.ram_available_bytes)


def _spec_of(config: EngineConfig, spec: ModelSpec | None) -> ModelSpec | None:
    """One rank's shapes (the whole model with one rank); None where they cannot be read yet."""
    if spec is None:
        try:
            spec = ModelSpec.from_model_arg(config.model)
        except Exception as e:  # the loader will report the real problem with its own message
            logger.debug("no plan before loading: %s", e)
            return None
    return spec.per_rank(config.tensor_parallel_size)  # each rank plans its own card


def startup_plan(
    config: EngineConfig,
    device_total_bytes: int | None,
    gpu_name: str | None,
    calibration: Bandwidths | None = None,
    *,
    device: str = "cuda",
    host_available_bytes: int | None = None,
    disk_free_bytes: int | None = None,
    measured: Measured | None = None,
    spec: ModelSpec | None = None,
    context_len: int | None = None,
) -> StartupPlan | None:
    """The plan for this engine, or None when its shapes or its device budget are not known.

    `device_total_bytes`/`gpu_name` describe the CUDA card (None on the CPU);
    `host_available_bytes` sizes a pool in host RAM and the mode's automatic cpu tier,
    `disk_free_bytes` (of the disk tier's directory) its disk tier; `measured` and
    `spec`/`context_len` (the loaded model's) are the engine's after loading."""
    config = with_attention_mode(config, device)
    spec = _spec_of(config, spec)
    if spec is None:
        return None
    room = HostRoom(host_available_bytes, disk_free_bytes)
    budgeted = _plan_request(config, spec, device, device_total_bytes, room, measured, context_len)
    if budgeted is None:
        return None
    budgeted = fit_tiers(budgeted, MODES[config.mode], room, auto_tiers(config, device))
    bandwidths = planning_rates(calibration, gpu_name, device)  # kvspill plan's choice (plan/host_rates.py)
    plan = make_plan(budgeted, bandwidths)
    return StartupPlan(plan=plan, bandwidths=bandwidths, table=format_plan_table({"this engine": plan}))


def mode_config(
    config: EngineConfig,
    device: str,
    device_total_bytes: int | None,
    room: HostRoom,
    spec: ModelSpec | None = None,
) -> EngineConfig:
    """`config` with the context of its mode: extended and extreme the longest their
    tiers hold (up to 4x and 8x), each with the RoPE scaling that reaches it (plan/fit.py). A context or
    RoPE scaling the user gave wins; default mode and unknown shapes come back unchanged."""
    mode = MODES[config.mode]
    if mode.context_factor == 1 or config.rope_scaling is not None:
        return config
    spec = _spec_of(with_attention_mode(config, device), spec)
    if spec is None:
        return config

    def holds(context: int) -> int:
        config_at = with_attention_mode(replace(config, max_model_len=context), device)
        request = _plan_request(config_at, spec, device, device_total_bytes, room, None, None)
        if request is None:
            return context
        auto = auto_tiers(config_at, device)
        return longest_context(request, mode, room, auto, spec.max_position_embeddings)

    try:
        context, rope = mode_context(mode, spec, config.max_model_len, holds)
    except ValueError as e:
        raise InvalidParameterError("mode", f"--mode {mode.name}: {e}") from e
    return replace(config, max_model_len=context, rope_scaling=rope)


def enforce(startup: StartupPlan, config: EngineConfig, on_gpu: bool) -> None:
    """Stop start-up when a CUDA plan cannot hold one sequence of the context, with advice.

    A user who fixed the KV size (`num_kv_blocks`, `kv_cache_memory_bytes`) took control: then
    the plan only warns."""
    if not on_gpu or startup.plan.fits:
        return
    if config.num_kv_blocks is not None or config.kv_cache_memory_bytes is not None:
        logger.warning("the memory plan does not fit, going on with the KV size you set:\n%s", startup.table)
        return
    raise OutOfKVMemoryError(
        "The memory plan does not fit:\n"
        + startup.table
        + "\nChange one of the options above (the advice lines), or lower --max-model-len."
    )

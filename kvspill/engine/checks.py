"""What engine start-up checks and decides before loading anything: the device and dtype, the
host's pre-flight (the budget flags against the host's RAM, disk and card, then CPU attention's
threads and cores), fp8 KV on the card (int8 needs nothing), and an int4 checkpoint against
--quantization."""

from __future__ import annotations

import logging
import os

import torch

from kvspill.config import EngineConfig
from kvspill.engine.host_budgets import check_budgets
from kvspill.errors import ContextLengthExceededError, InvalidParameterError
from kvspill.hardware.checks import run_checks
from kvspill.model.parallel import SINGLE, TensorParallel
from kvspill.plan.choices import vram_ceiling_bytes
from kvspill.plan.cpu_dtype import pick_cpu_dtype
from kvspill.plan.gpu_budget import RUNTIME_RESERVE_BYTES
from kvspill.plan.spec import ModelSpec
from kvspill.sampling_params import SamplingParams

logger = logging.getLogger("kvspill.engine.setup")  # the name these lines had before the split


def pick_device(config: EngineConfig, tp: TensorParallel = SINGLE) -> torch.device:
    """The engine's device; with tensor parallelism rank r takes cuda:r (and makes it current)."""
    if tp.size > 1 and config.device != "cpu" and torch.cuda.is_available():
        if torch.cuda.device_count() < tp.size:
            raise InvalidParameterError(
                "tensor_parallel_size",
                f"--tensor-parallel-size {tp.size} needs {tp.size} GPUs; {torch.cuda.device_count()} are visible",
            )
        torch.cuda.set_device(tp.rank)
        return torch.device("cuda", tp.rank)
    if config.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if config.device.startswith("cuda") and not torch.cuda.is_available():
        raise InvalidParameterError(
            "device", f"--device {config.device} asked for CUDA but no CUDA GPU is visible; use --device cpu"
        )
    return torch.device(config.device)


# The caching allocator's setting the engine runs with unless PYTORCH_CUDA_ALLOC_CONF is set.
EXPANDABLE_SEGMENTS = "expandable_segments:True"


def use_expandable_segments(device: torch.device, tp: TensorParallel = SINGLE) -> bool:
    """Let the allocator grow segments in place instead of caching fixed-size ones (a single-rank
    CUDA engine, before the allocator's first allocation, where the user set no allocator
    configuration of their own; returns whether it is on). Under the tight cap (`cap_allocator`) fixed
    segments fragment: W3 fp8 at 128K with 16K-token prefill chunks failed a 448 MiB MLP temporary
    with 757 MiB cached free beside it, halved its steps and took 28.6 s to the first token; with
    expandable segments nothing failed, 19.2 s, decode graphs alike (H200, torch 2.11,
    2026-11-28). Tensor-parallel ranks keep fixed segments: not measured with NCCL there."""
    if device.type != "cuda" or tp.size > 1 or "PYTORCH_CUDA_ALLOC_CONF" in os.environ:
        return False
    if torch.cuda.is_initialized():
        if torch.cuda.memory_reserved(device) > 0:
            return False  # segments exist: leave the allocator as it is
        # CUDA has started, so it read the environment already
        _set_allocator_settings(EXPANDABLE_SEGMENTS)
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = EXPANDABLE_SEGMENTS  # read when CUDA starts, and by children
    logger.info("CUDA allocator: %s (set PYTORCH_CUDA_ALLOC_CONF to choose another)", EXPANDABLE_SEGMENTS)
    return True


def _set_allocator_settings(settings: str) -> None:
    """Change the live allocator's settings: torch >= 2.9's accelerator call, else the CUDA one
    (which torch 2.11 still has, with a FutureWarning on every engine start-up)."""
    setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None)
    if setter is None:
        setter = torch.cuda.memory._set_allocator_settings
    setter(settings)


def pick_dtype(config: EngineConfig, device: torch.device) -> torch.dtype:
    if config.dtype != "auto":
        return getattr(torch, config.dtype)
    if device.type == "cuda":
        return torch.bfloat16
    # fp16 where this CPU runs it as fast as fp32, else fp32: measured once per host and cached
    # (plan/cpu_dtype.py says why). The runner stops with advice if fp16 ever overflows.
    dtype: torch.dtype = getattr(torch, pick_cpu_dtype())
    return dtype


def preflight(config: EngineConfig) -> None:
    """Stop on a budget the host cannot hold (before any weight loads); report what will hurt
    offloading (with the fix) and give CPU attention its threads and cores."""
    check_budgets(config)
    offloading = bool(
        config.cpu_kv_budget_bytes
        or config.disk_kv_budget_bytes
        or config.num_cpu_kv_blocks
        or config.num_disk_kv_blocks
        or config.attention == "cpu"
    )
    for check in run_checks(config.kv_disk_dir):
        if check.status in ("warn", "fail"):
            # What hurts offloading is a warning only when this engine offloads.
            level = logging.WARNING if offloading or check.status == "fail" else logging.INFO
            logger.log(level, "pre-flight: %s: %s -> %s", check.name, check.value, check.fix)
        else:
            logger.debug("pre-flight: %s: %s", check.name, check.value)
    threads = config.cpu_attention_threads
    if threads is None:
        return
    torch.set_num_threads(threads)
    if hasattr(os, "sched_getaffinity"):
        allowed = sorted(os.sched_getaffinity(0))
        if len(allowed) > threads:
            # The engine thread plus `threads` dedicated cores (the last ones: core 0 takes interrupts).
            try:
                os.sched_setaffinity(0, allowed[-(threads + 1) :])
            except OSError as e:
                logger.warning("could not pin CPU attention to %d cores (%s): running unpinned", threads, e)


# What a step's reserved memory can grow by beyond the bytes it allocates: torch's allocator serves
# a 1-10 MB request from a new 20 MiB segment, a small one from a 2 MiB segment, and rounds large
# ones up to 2 MiB. The plan's activation peak counts allocated bytes: an fp32 SmolLM2 engine 0.19
# GiB over its budget, capped at reserved + that peak (0.01 GiB), failed its first warm-up step
# on a 20 MiB segment for a dequantized weight of a few MiB (H200, 2026-11-28).
ALLOCATOR_STEP_SLACK_BYTES = 64 * 2**20


def cap_allocator(
    config: EngineConfig, device: torch.device, leave_runtime: bool = False, step_bytes: int = 0
) -> None:
    """Cap torch's caching allocator at the budget (`--vram-budget`, else the card's
    `--gpu-memory-utilization` share). With `leave_runtime` (once start-up has allocated all it
    holds: weights, pools, decode graphs, the runner's stream buffers) the cap is the budget less this
    process's own memory outside the allocator now (CUDA context, kernel images, library
    workspaces). Capped at the whole budget, cached free blocks grew into that share: W3 1M held
    24.52 GiB of a 24 GiB budget on the card (23.71 GiB reserved, 22.92 allocated). At the cap the
    allocator frees its cached blocks and retries before it reports out of memory.

    The cap never falls below what the allocator holds plus `step_bytes` (a step's temporaries,
    the plan's activation peak) plus the allocator's segment slack (`ALLOCATOR_STEP_SLACK_BYTES`):
    where the plan under-counted what start-up allocated, the engine
    runs over the budget and says so rather than failing its first steps. It is set after the
    graphs are captured because the plan's graph term is an estimate: capped before, an fp32
    SmolLM2 engine on a 5.6 GiB budget failed its capture by 108 MiB (2026-11-28); and after the
    runner is built: capped before its stream buffers, the same engine (an eval's third in one
    process, 0.14 GiB over the budget) failed their 24 MiB (H200, 2026-11-28).

    Other processes' memory is not subtracted: the budget is this process's (the plan charges
    them only what they leave short of it, `runtime_bytes_beside`). Subtracting it left 0 bytes
    to each of 15 evals sharing one H200 (2026-11-28): all failed at their first pool allocation."""
    if device.type != "cuda":
        return
    total = torch.cuda.get_device_properties(device).total_memory
    ceiling = vram_ceiling_bytes(config.vram_budget_bytes, config.gpu_memory_utilization, total)
    assert ceiling is not None
    index = device.index if device.index is not None else torch.cuda.current_device()
    if leave_runtime:
        # Start-up's cached free blocks (graph capture, warm-up) are not the engine's: hand them
        # back, or the floor below counts them (0.57 GiB of 4.63 reserved on the eval's reference
        # engine, which then ran 0.25 GiB over its budget; H200, 2026-11-28).
        torch.cuda.empty_cache()
        reserved = torch.cuda.memory_reserved(index)
        free, _ = torch.cuda.mem_get_info(index)
        outside = own_memory_outside_allocator(index, reserved, card_outside=max(total - free - reserved, 0))
        floor = reserved + step_bytes + ALLOCATOR_STEP_SLACK_BYTES
        if ceiling - outside < floor:
            logger.warning(
                "the engine holds %.2f GiB outside torch and %.2f GiB in it, and a step needs %.2f GiB: "
                "%.2f GiB over the %.2f GiB budget (the plan counted less than start-up allocated)",
                outside / 2**30,
                reserved / 2**30,
                step_bytes / 2**30,
                (floor + outside - ceiling) / 2**30,
                ceiling / 2**30,
            )
        ceiling = max(ceiling - outside, floor)
    torch.cuda.set_per_process_memory_fraction(min(1.0, max(ceiling, 0) / total), index)


def runtime_bytes_beside(config: EngineConfig, device: torch.device, loaded_bytes: int) -> int:
    """What the plan charges as runtime once the weights (`loaded_bytes`) are loaded: this
    process's memory on the card beyond them (CUDA context, kernel images, tensors made before
    loading), plus the part of the budget that other processes' memory leaves no room for.
    The budget is this process's (as vLLM's --gpu-memory-utilization is an instance's): counting
    other processes' memory in full made three 8 GiB engines on one 141 GiB H200 each stop with
    "No memory is left for the KV cache" (2026-11-28). Where NVML cannot tell this process from
    others, all the card's memory in use counts as this process's (the safe side)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    free, total = torch.cuda.mem_get_info(index)
    card_used = total - free
    own, num_processes = _nvml_process_memory(index)
    if own is None or num_processes == 1:
        own = card_used
    others = max(card_used - own, 0)
    budget = vram_ceiling_bytes(config.vram_budget_bytes, config.gpu_memory_utilization, total)
    assert budget is not None
    shortfall = max(budget - (total - others), 0)
    if others:
        logger.info(
            "other processes hold %.2f GiB of the card: %s",
            others / 2**30,
            f"{shortfall / 2**30:.2f} GiB of this process's {budget / 2**30:.2f} GiB budget cannot be had"
            if shortfall
            else f"this process's {budget / 2**30:.2f} GiB budget still fits beside them",
        )
    return max(own - loaded_bytes, 0) + shortfall


def own_memory_outside_allocator(index: int, reserved: int, card_outside: int) -> int:
    """This process's device memory outside torch's allocator: NVML's figure for this process less
    what the allocator has reserved. Where NVML cannot name this process (no NVML, or a container
    with its own PID namespace) but lists a single process, that process is this one (it holds a
    CUDA context), so all the card's outside memory is ours; with several, ours cannot be told from
    theirs and the plan's runtime reserve (640 MiB) stands in for it."""
    used, num_processes = _nvml_process_memory(index)
    if used is not None:
        return max(used - reserved, 0)
    if num_processes == 1:
        return card_outside
    return min(card_outside, RUNTIME_RESERVE_BYTES)


def _nvml_process_memory(index: int) -> tuple[int | None, int | None]:
    """(this process's bytes on the card per NVML or None, how many processes NVML lists or None)."""
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        uuid = str(torch.cuda.get_device_properties(index).uuid)
        handle = pynvml.nvmlDeviceGetHandleByUUID(
            uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
        )
        processes = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except Exception as e:  # no driver library, an old driver, a device NVML does not show
        logger.debug("NVML cannot list the card's processes (%s)", e)
        return None, None
    pid = os.getpid()
    for process in processes:
        if process.pid == pid and isinstance(process.usedGpuMemory, int):
            return process.usedGpuMemory, len(processes)
    return None, len(processes)


def check_kv_cache_dtype(config: EngineConfig, device: torch.device) -> None:
    """fp8 KV: Triton loads and stores fp8 only on compute capability 8.9+ (Ada, Hopper). int8 KV
    needs no special hardware (int8 loads, fp32 scales): every GPU the engine runs on."""
    if config.kv_cache_dtype in ("auto", "int8") or device.type != "cuda":
        return
    if torch.cuda.get_device_capability(device) < (8, 9):
        raise InvalidParameterError(
            "kv_cache_dtype",
            f"--kv-cache-dtype {config.kv_cache_dtype} needs a GPU of compute capability 8.9 or newer "
            f"(Ada, Hopper); {torch.cuda.get_device_name(device)} is "
            f"{'.'.join(map(str, torch.cuda.get_device_capability(device)))}: use --kv-cache-dtype auto",
        )


def check_context_shift(config: EngineConfig, num_cpu_blocks: int, num_disk_blocks: int) -> None:
    """--context-shift with the cold tiers the default mode sized by itself (the flags that ask for
    one are refused by EngineConfig): the kept keys turn in the GPU tier only."""
    if config.context_shift and (num_cpu_blocks or num_disk_blocks):
        raise InvalidParameterError(
            "context_shift",
            f"--context-shift needs all KV in the GPU tier, but this GPU's share holds less than one "
            f"--max-model-len context and the plan added a cpu tier ({num_cpu_blocks} blocks) and disk "
            f"tier ({num_disk_blocks} blocks): lower --max-model-len, raise --vram-budget, or pass "
            "--cpu-kv-budget 0 to fail instead of spilling, or drop --context-shift",
        )


def check_int4_format(config: EngineConfig, kind: str) -> None:
    """--quantization awq|gptq names the checkpoint's own format; `none` cannot undo an int4 one."""
    if config.quantization not in ("awq", "gptq", "none"):
        return
    method = ModelSpec.from_model_arg(config.model).quant_method if kind == "dir" else None
    if config.quantization in ("awq", "gptq") and method != config.quantization:
        raise InvalidParameterError(
            "quantization",
            f"--quantization {config.quantization}: the checkpoint is {method or 'not quantized'}; "
            "drop --quantization to use the file's own format",
        )
    if config.quantization == "none" and method in ("awq", "gptq"):
        raise InvalidParameterError(
            "quantization",
            f"--quantization none: a {method} int4 checkpoint runs in its int4 blocks (as Q4_1); drop --quantization",
        )


def check_prompt(
    token_ids: list[int], params: SamplingParams, vocab_size: int, max_model_len: int, shifts: bool = False
) -> None:
    """A request's token ids: not empty, inside the vocabulary, and with `max_tokens` within the
    model's length (unless it `shifts` its context past it: --context-shift)."""
    if not token_ids:
        raise InvalidParameterError("prompt", "the prompt is empty: give at least one token")
    bad = next((t for t in token_ids if not (0 <= t < vocab_size)), None)
    if bad is not None:
        raise InvalidParameterError(
            "prompt", f"token id {bad} is outside the model's vocabulary [0, {vocab_size})"
        )
    n = len(token_ids)
    if n >= max_model_len:
        raise ContextLengthExceededError(max_model_len, n)
    if not shifts and params.max_tokens is not None and n + params.max_tokens > max_model_len:
        raise ContextLengthExceededError(max_model_len, n, params.max_tokens)


def truncate_prompt(token_ids: list[int], keep: int, max_model_len: int) -> list[int]:
    """vLLM's truncate_prompt_tokens: the prompt's last `keep` tokens (-1: as many as the model's
    length leaves room for beside one output token)."""
    keep = max_model_len - 1 if keep == -1 else keep
    return token_ids[-keep:]

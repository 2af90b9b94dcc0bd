"""What engine start-up checks and decides before loading anything: the device and dtype, the
host's pre-flight (with CPU attention's threads and cores), fp8 KV on the card (int8 needs
nothing), and an int4 checkpoint against --quantization."""

from __future__ import annotations

import logging
import os

import torch

from kvspill.config import EngineConfig
from kvspill.errors import ContextLengthExceededError, InvalidParameterError
from kvspill.model.parallel import SINGLE, TensorParallel
from kvspill.plan.cpu_dtype import pick_cpu_dtype
from kvspill.plan.preflight import run_checks
from kvspill.plan.spec import ModelSpec
from kvspill.sampling_params import SamplingParams

logger = logging.getLogger("kvspill.engine_setup")  # the name these lines had before the split


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
    """Report what will hurt offloading (with the fix) and give CPU attention its threads and cores."""
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


def cap_allocator(config: EngineConfig, device: torch.device, leave_runtime: bool = False) -> None:
    """Cap torch's caching allocator at the budget (`--vram-budget`, else the card's
    `--gpu-memory-utilization` share). With `leave_runtime` (once the weights are loaded and the
    plan has passed) the cap is the budget less what is in use outside the allocator now (CUDA
    context, kernel images, other processes): the memory the plan charges as runtime. Capped at
    the whole budget, cached free blocks grew into that share: W3 1M held 24.52 GiB of a 24 GiB
    budget on the card (23.71 GiB reserved, 22.92 allocated). At the cap the allocator frees its
    cached blocks and retries before it reports out of memory."""
    if device.type != "cuda":
        return
    total = torch.cuda.get_device_properties(device).total_memory
    ceiling = config.vram_budget_bytes or int(total * config.gpu_memory_utilization)
    index = device.index if device.index is not None else torch.cuda.current_device()
    if leave_runtime:
        free, _ = torch.cuda.mem_get_info(index)
        ceiling -= max(total - free - torch.cuda.memory_reserved(index), 0)
    torch.cuda.set_per_process_memory_fraction(min(1.0, max(ceiling, 0) / total), index)


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


def check_prompt(token_ids: list[int], params: SamplingParams, vocab_size: int, max_model_len: int) -> None:
    """A request's token ids: not empty, inside the vocabulary, and with `max_tokens` within the
    model's length."""
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
    if params.max_tokens is not None and n + params.max_tokens > max_model_len:
        raise ContextLengthExceededError(max_model_len, n, params.max_tokens)

"""Device and dtype choice, and how many KV blocks the device pool gets.

On CUDA the pool gets what is left of `gpu_memory_utilization` of the card after the weights,
the measured activation peak of one full prefill chunk, and a reserve for CUDA graphs and
allocator slack. On the CPU the pool is sized to hold `max_num_seqs` sequences of
`max_model_len` when RAM allows (capped at a quarter of available RAM).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import psutil
import torch

from kvspill.config import EngineConfig
from kvspill.errors import InvalidParameterError, OutOfKVMemoryError

logger = logging.getLogger(__name__)

GIB = 2**30
# Reserve for CUDA graph pools and allocator fragmentation: a few hundred MiB is what small
# models' decode graphs took in practice; keep it explicit so the plan can print it.
CUDA_GRAPH_RESERVE_BYTES = 512 * 2**20


def pick_device(config: EngineConfig) -> torch.device:
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
    # On x86 CPUs oneDNN's fp16 GEMV beat bf16 (6.2 vs 10.7 ms per SmolLM2 token, 2 threads) and
    # fp16 keeps 3 more mantissa bits: greedy output matched fp32 for 64 tokens where bf16
    # drifted (docs/performance.md). The runner stops with advice if fp16 ever overflows.
    return torch.float16


def num_blocks_for_bytes(kv_bytes: int, block_bytes: int) -> int:
    return max(0, kv_bytes // block_bytes)


def size_kv_pool(
    config: EngineConfig,
    device: torch.device,
    block_bytes: int,
    max_model_len: int,
    profile_activations: Callable[[], int] | None = None,
) -> int:
    """Number of KV blocks for the device pool (never writes back into the config)."""
    blocks_per_seq = -(-max_model_len // config.block_size)
    if config.num_kv_blocks is not None:
        return config.num_kv_blocks
    if config.kv_cache_memory_bytes is not None:
        num = num_blocks_for_bytes(config.kv_cache_memory_bytes, block_bytes)
    elif device.type == "cuda":
        # Cached-but-free allocator blocks (temporaries of weight loading: dtype casts, random
        # init) count as used in mem_get_info: hand them back first, so the pool gets that room.
        torch.cuda.empty_cache()
        free, total = torch.cuda.mem_get_info(device)
        used_now = total - free
        activations = profile_activations() if profile_activations is not None else 0
        budget = config.vram_budget_bytes or int(total * config.gpu_memory_utilization)
        kv_bytes = budget - used_now - activations - CUDA_GRAPH_RESERVE_BYTES
        num = num_blocks_for_bytes(kv_bytes, block_bytes)
        logger.info(
            "KV pool: budget %.2f GiB - in use %.2f GiB - activations %.2f GiB - reserve %.2f GiB = %.2f GiB",
            budget / GIB,
            used_now / GIB,
            activations / GIB,
            CUDA_GRAPH_RESERVE_BYTES / GIB,
            max(kv_bytes, 0) / GIB,
        )
    else:
        want = blocks_per_seq * min(config.max_num_seqs, 8)
        cap = num_blocks_for_bytes(psutil.virtual_memory().available // 4, block_bytes)
        num = max(min(want, cap), min(blocks_per_seq, cap))
    if num < 2:
        raise OutOfKVMemoryError(
            f"No memory is left for the KV cache: one block needs {block_bytes} bytes. "
            "Lower --max-num-batched-tokens, raise --gpu-memory-utilization, or use a smaller model."
        )
    if num < blocks_per_seq:
        logger.warning(
            "the KV pool holds %d tokens, fewer than --max-model-len %d: long requests will be "
            "preempted or refused; lower --max-model-len or give the cache more memory",
            num * config.block_size,
            max_model_len,
        )
    return num

"""Start-up: resolve and load the model, size and allocate the KV pool, capture CUDA graphs.

Order matters on CUDA: weights first, then one profiling forward of a full prefill chunk (its
peak is the activation reserve), then the KV pool from what is left, then graph capture.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import numpy as np
import torch

from kvspill.plan.calibrate import load_calibration
from kvspill.config import EngineConfig
from kvspill.kv.cold_attention import ColdAttentionConfig
from kvspill.kv.storage import KVLayout, KVStorage, TieredKVStorage
from kvspill.model.loader import LoadedModel, load_model
from kvspill.model.random_init import build_random_model, is_random_model
from kvspill.model.resolve import resolve_model
from kvspill.plan.arithmetic import COLD_STAGE_TOKENS
from kvspill.plan.preflight import run_checks
from kvspill.runner.attention import AttentionMetadata, PagedAttention
from kvspill.runner.cuda_graphs import DecodeGraphs
from kvspill.runner.memory import pick_device, pick_dtype, size_kv_pool
from kvspill.runner.model_runner import ModelRunner
from kvspill.plan.startup import enforce, startup_plan
from kvspill.tokenizer import TokenizerBundle, load_tokenizer

logger = logging.getLogger(__name__)


@dataclass
class RunnerBundle:
    runner: ModelRunner
    storage: TieredKVStorage
    tokenizer: TokenizerBundle | None  # None for random-weight benchmark models
    eos_token_ids: frozenset[int]
    loaded: LoadedModel
    num_blocks: int
    max_model_len: int
    vocab_size: int
    device: torch.device
    dtype: torch.dtype


def _profile_prefill_peak(
    loaded: LoadedModel, layout: KVLayout, num_tokens: int, device: torch.device
) -> int:
    """Peak bytes one prefill chunk of `num_tokens` allocates beyond the weights (CUDA only)."""
    num_blocks = -(-num_tokens // layout.block_size) + 1
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    storage = KVStorage(layout, num_blocks, device)
    positions = np.arange(num_tokens, dtype=np.int64)
    block_table = torch.arange(num_blocks, dtype=torch.int32, device=device).view(1, -1)
    meta = AttentionMetadata(
        slot_mapping=torch.from_numpy(positions).to(device),
        num_decodes=0,
        decode_block_tables=block_table[:0],
        decode_seq_lens=torch.zeros(0, dtype=torch.int32, device=device),
        prefill_block_tables=block_table,
        prefill_query_start_loc=torch.tensor([0, num_tokens], dtype=torch.int32, device=device),
        prefill_seq_lens=torch.tensor([num_tokens], dtype=torch.int32, device=device),
        prefill_max_query_len=num_tokens,
    )
    with torch.inference_mode():
        ids = torch.zeros(num_tokens, dtype=torch.int64, device=device)
        hidden = loaded.model(ids, torch.from_numpy(positions).to(device), PagedAttention(storage, meta, 1.0))
        loaded.model.compute_logits(hidden[-1:])
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - before - storage.nbytes
    del storage, hidden
    torch.cuda.empty_cache()
    return max(peak, 0)


def _plan_and_cap(config: EngineConfig, device: torch.device) -> None:
    """Print the memory plan before loading; on CUDA stop if it cannot fit, and cap the allocator."""
    total = torch.cuda.get_device_properties(device).total_memory if device.type == "cuda" else None
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    startup = startup_plan(config, total, name, load_calibration())
    if startup is not None:
        logger.info("memory plan (bandwidths: %s):\n%s", startup.bandwidths.source, startup.table)
        enforce(startup, config, on_gpu=device.type == "cuda")
    if total is not None:
        ceiling = config.vram_budget_bytes or int(total * config.gpu_memory_utilization)
        # A hard ceiling for the caching allocator (weights, KV, activations, graph pools); the
        # CUDA context itself is outside it, and the KV sizing subtracts it (memory.py).
        index = device.index if device.index is not None else torch.cuda.current_device()
        torch.cuda.set_per_process_memory_fraction(min(1.0, ceiling / total), index)


def _tier_blocks(explicit: int | None, budget_bytes: int, layout: KVLayout) -> int:
    return explicit if explicit is not None else budget_bytes // layout.block_bytes


def _cpu_attention_storage(config: EngineConfig, layout: KVLayout, max_model_len: int) -> TieredKVStorage:
    """--attention cpu: the whole KV pool in host RAM; the GPU keeps only weights and activations."""
    cpu = torch.device("cpu")
    if config.num_kv_blocks is not None:
        num_blocks = config.num_kv_blocks
    elif config.cpu_kv_budget_bytes:
        num_blocks = config.cpu_kv_budget_bytes // layout.block_bytes
    else:
        num_blocks = size_kv_pool(config, cpu, layout.block_bytes, max_model_len)
    return TieredKVStorage(layout, num_blocks, cpu)  # the "gpu" tier is host RAM; no cold tiers


def _capture_graphs(config: EngineConfig, loaded: LoadedModel, storage: KVStorage) -> DecodeGraphs:
    graphs = DecodeGraphs(
        loaded.model,
        storage,
        scale=loaded.head_dim**-0.5,
        max_num_seqs=min(config.max_num_seqs, 256),
        max_blocks_per_seq=-(-loaded.max_model_len // config.block_size),
    )
    graphs.capture()
    return graphs


def _cold_config(config: EngineConfig) -> ColdAttentionConfig:
    """Cold-attention path; the stream/CPU split follows the saved calibration when there is one."""
    calibration = load_calibration()
    return ColdAttentionConfig(
        path=config.cold_attention,
        cpu_attn_gbs=calibration.cpu_attn_gbs if calibration else None,
        h2d_gbs=calibration.h2d_gbs if calibration else None,
        # The plan reserves two staging buffers of COLD_STAGE_TOKENS per layer: use all of it.
        # Fewer, larger chunks keep the host ahead of the H2D gathers (W2 3 x 32K on an H200:
        # 256-block chunks left the copy stream idle 45% of a step waiting for launches).
        stream_chunk_blocks=max(1, COLD_STAGE_TOKENS // config.block_size),
    )


def _preflight(config: EngineConfig) -> None:
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


def build_runner(config: EngineConfig) -> RunnerBundle:
    device = pick_device(config)
    dtype = pick_dtype(config, device)
    _preflight(config)
    _plan_and_cap(config, device)
    tokenizer: TokenizerBundle | None
    if is_random_model(config.model):
        assert config.model is not None
        tokenizer, eos_token_ids = None, frozenset[int]()
        loaded = build_random_model(config.model, device, dtype, config.max_model_len)
    else:
        resolved = resolve_model(config.model)
        loaded = load_model(resolved, device, dtype, config.rope_scaling, config.max_model_len)
        tokenizer = load_tokenizer(resolved, loaded.hf_config)
        eos_token_ids = tokenizer.eos_token_ids
    layout = KVLayout(
        num_layers=loaded.num_layers,
        block_size=config.block_size,
        num_kv_heads=loaded.num_kv_heads,
        head_dim=loaded.head_dim,
        dtype=dtype,
    )
    if config.attention == "cpu":
        storage = _cpu_attention_storage(config, layout, loaded.max_model_len)
        num_blocks, graphs = storage.num_blocks, None
    else:
        chunk = min(config.max_num_batched_tokens, loaded.max_model_len)
        num_blocks = size_kv_pool(
            config,
            device,
            layout.block_bytes,
            loaded.max_model_len,
            profile_activations=(lambda: _profile_prefill_peak(loaded, layout, chunk, device))
            if device.type == "cuda"
            else None,
        )
        storage = TieredKVStorage(
            layout,
            num_blocks,
            device,
            num_cpu_blocks=_tier_blocks(config.num_cpu_kv_blocks, config.cpu_kv_budget_bytes, layout),
            num_disk_blocks=_tier_blocks(config.num_disk_kv_blocks, config.disk_kv_budget_bytes, layout),
            disk_dir=config.kv_disk_dir,
        )
        graphs = (
            _capture_graphs(config, loaded, storage)
            if device.type == "cuda" and not config.enforce_eager
            else None
        )
    logger.info(
        "KV tiers: gpu %d blocks (%.2f GiB, %s), cpu %d blocks (%.2f GiB%s), disk %d blocks (%.2f GiB) of %d tokens",
        storage.num_blocks,
        storage.nbytes / 2**30,
        storage.device,
        storage.num_cpu_blocks,
        storage.host_nbytes / 2**30,
        ", pinned" if storage.cpu_pinned else "",
        storage.num_disk_blocks,
        storage.disk_nbytes / 2**30,
        config.block_size,
    )
    runner = ModelRunner(
        loaded.model,
        storage,
        head_dim=loaded.head_dim,
        eos_token_ids=eos_token_ids,
        seed=config.seed,
        graphs=graphs,
        device=device,
        cold_config=_cold_config(config),
    )
    return RunnerBundle(
        runner=runner,
        storage=storage,
        tokenizer=tokenizer,
        eos_token_ids=eos_token_ids,
        loaded=loaded,
        num_blocks=num_blocks,
        max_model_len=loaded.max_model_len,
        vocab_size=loaded.vocab_size,
        device=device,
        dtype=dtype,
    )

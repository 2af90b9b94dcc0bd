"""Engine construction: device and dtype, pre-flight, the memory plan, the model, the KV pools.

The runner only runs steps; everything that decides what to build lives here, in order:
1. pick the device and dtype; pre-flight checks (warnings with fixes); read the machine's facts
   (`plan.choices.DeviceFacts`) and the saved calibration, once;
2. the memory plan from the model's shapes (`plan.startup.startup_plan`), printed before loading;
   on CUDA one that cannot fit stops start-up with advice, and the budget caps the allocator (from
   step 4 on, less the memory in use outside it);
3. load the weights (or build a random-weight benchmark model) and the tokenizer;
4. measure (weights on the device; on CUDA the peak of one profiled prefill chunk and memory in
   use outside torch) and plan again with those measurements: that plan, and no other formula,
   gives the gpu/cpu/disk tier sizes in blocks, so `kvspill plan` and `kv_stats()` agree;
5. allocate the tiers, capture CUDA graphs, build the runner.

The runtime choices (cold path, split thresholds, which CUDA graphs, the byte ceiling) come from
one record, `plan.choices.resolve_choices` (`runtime_choices` here), the same function the plan
calls with its request: nothing below re-derives them, and the runner is handed the cold path's
backend configuration and graph kind, never a flag to interpret.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from kvspill.attention.cold.config import cold_config, kv_format_of
from kvspill.config import EngineConfig, with_attention_mode
from kvspill.engine.checks import (
    cap_allocator,
    check_int4_format,
    check_kv_cache_dtype,
    pick_device,
    pick_dtype,
    preflight,
    runtime_bytes_beside,
    use_expandable_segments,
)
from kvspill.engine.phases import StartupPhases
from kvspill.env import q6k_split_on, scale_pairs_mode
from kvspill.errors import InvalidParameterError, OutOfKVMemoryError, UnsupportedModelError
from kvspill.gguf.reader import shared_readers
from kvspill.guided.compiler import GuidedCompiler
from kvspill.kernels.cpu_attention import load_kernel
from kvspill.kernels.cpu_decode_ops import load_kernel as load_decode_ops_kernel
from kvspill.kernels.cpu_gguf import load_kernel as load_gguf_kernel
from kvspill.model.layers import rope_table_bytes
from kvspill.model.loader import LoadedModel, check_max_model_len, load_model
from kvspill.model.parallel import SINGLE, TensorParallel
from kvspill.model.quant import (
    attach_scale_pairs,
    dequant_scratch_bytes,
    held_scale_pair_bytes,
    model_weight_bytes,
    quantized_weights,
    split_q6k_weights,
)
from kvspill.model.random_init import build_random_model, is_random_model
from kvspill.model.resolve import EMBEDDED_FILE, ResolvedModel, resolve_model, resolve_tokenizer
from kvspill.plan import Bandwidths, MemoryPlan
from kvspill.plan.calibrate import load_calibration
from kvspill.plan.choices import (
    DeviceFacts,
    RuntimeChoices,
    mixed_decodes,
    prefill_floor_tokens,
    resolve_choices,
)
from kvspill.plan.fit import HostRoom, fit_line
from kvspill.plan.flag_plans import read_host_room
from kvspill.plan.spec import ModelSpec
from kvspill.plan.startup import (
    Measured,
    StartupPlan,
    enforce,
    keeps_gguf_quantized,
    mode_config,
    startup_plan,
)
from kvspill.plan.weights import scale_pairs_possible
from kvspill.runner.cuda_graphs import DecodeGraphs
from kvspill.runner.mixed_graphs import MixedGraphs
from kvspill.runner.model_runner import ModelRunner
from kvspill.runner.profile import profile_step_peak
from kvspill.storage.layout import check_skip_layers, engine_layout
from kvspill.storage.persist import kv_fingerprint, model_identity
from kvspill.storage.storage import KVLayout, KVStorage, TieredKVStorage
from kvspill.text.chat_templates import choose_chat_template
from kvspill.text.sampling_defaults import describe, model_sampling_defaults
from kvspill.text.tokenizer import TokenizerBundle, load_tokenizer

logger = logging.getLogger(__name__)
GIB = 2**30


@dataclass
class EngineParts:
    """What start-up built; the engine owns it. `memory_plan` sized the tiers (block for block)."""

    runner: ModelRunner
    storage: TieredKVStorage
    tokenizer: TokenizerBundle | None  # None for random-weight benchmark models
    eos_token_ids: frozenset[int]
    loaded: LoadedModel
    memory_plan: MemoryPlan
    num_blocks: int
    max_model_len: int
    vocab_size: int
    device: torch.device
    dtype: torch.dtype
    kv_fingerprint: int  # seeds the prefix hashes; checks persisted blocks (storage/persist.py)
    choices: RuntimeChoices | None = None  # the record of runtime choices it was built by (plan/choices.py)


def _card(device: torch.device) -> tuple[int | None, str | None]:
    if device.type != "cuda":
        return None, None
    return torch.cuda.get_device_properties(device).total_memory, torch.cuda.get_device_name(device)


def host_room(config: EngineConfig) -> HostRoom:
    """What the host can give the tiers now, read as `kvspill plan` reads it."""
    return read_host_room(config.kv_disk_dir)


def _plan(
    config: EngineConfig,
    device: torch.device,
    calibration: Bandwidths | None,
    after_loading: tuple[Measured, ModelSpec, int] | None = None,  # measured, spec, context
) -> StartupPlan | None:
    total, name = _card(device)
    measured, spec, context_len = after_loading if after_loading is not None else (None, None, None)
    room = host_room(config)
    return startup_plan(
        config,
        total,
        name,
        calibration,
        device=device.type,
        host_available_bytes=room.ram_available_bytes,
        disk_free_bytes=room.disk_free_bytes,
        measured=measured,
        spec=spec,
        context_len=context_len,
    )


def plan_before_start(config: EngineConfig) -> tuple[EngineConfig, StartupPlan | None]:
    """What start-up will run, from the model's shapes and this host before anything loads: the
    config with its mode's context, and the memory plan (None: shapes not readable yet). Raises
    OutOfKVMemoryError where a CUDA plan cannot hold the context (`enforce`): `serve` calls this
    before binding its port, `--print-config` shows it."""
    device = pick_device(config)
    config = replace(config, dtype=str(pick_dtype(config, device)).removeprefix("torch."))
    config = with_attention_mode(config, device.type)
    config = mode_config(config, device.type, _card(device)[0], host_room(config))
    if config.max_model_len is not None and not is_random_model(config.model):
        # --max-model-len past the model's RoPE: refused here, not after serve has bound its port
        check_max_model_len(resolve_model(config.model), config.rope_scaling, config.max_model_len)
    startup = _plan(config, device, load_calibration())
    if startup is not None:
        enforce(startup, config, on_gpu=device.type == "cuda")
    return config, startup


def _plan_and_cap(
    config: EngineConfig, device: torch.device, calibration: Bandwidths | None
) -> StartupPlan | None:
    """Print the memory plan before loading; on CUDA stop if it cannot fit, and cap the allocator.
    Returns the plan (None where the model's shapes cannot be read before loading)."""
    startup = _plan(config, device, calibration)
    if startup is not None:
        check_skip_layers(config.kv_cache_dtype_skip_layers, startup.plan.request.spec.num_layers)
        logger.info("memory plan (bandwidths: %s):\n%s", startup.bandwidths.source, startup.table)
        enforce(startup, config, on_gpu=device.type == "cuda")
    cap_allocator(config, device)
    return startup


def _keeps_scale_pairs(config: EngineConfig, device: torch.device, startup: StartupPlan | None) -> bool:
    """Whether the loaded model gets its Q4_K scale pairs: as the plan before loading decided
    (KVSPILL_SCALE_PAIRS; "auto" keeps them where a whole context still fits the GPU tier), or,
    without a plan, where they may be kept and the switch is not off."""
    if startup is not None:
        return startup.plan.request.scale_pair_bytes > 0
    return scale_pairs_possible(device.type, config.max_num_seqs) and scale_pairs_mode() != "off"


def _measure(
    config: EngineConfig,
    graph_rows: int,
    loaded: LoadedModel,
    layout: KVLayout,
    device: torch.device,
    allocated_before: int,
) -> Measured:
    """The plan's measured inputs. On the CPU the weights are the parameters' bytes (so a plan made
    from the model's shapes, as `kvspill plan` makes it, lands on the same blocks). On CUDA the
    weights are what loading allocated; the rest of this process's memory on the card (CUDA
    context, other engines of this process) and what other processes leave short of the budget
    are runtime memory the pool cannot have (`runtime_bytes_beside`)."""
    if device.type != "cuda":
        return Measured(weight_bytes=model_weight_bytes(loaded.model), scale_pair_bytes=0)
    # the largest step the scheduler builds: a budget's worth of tokens (several sequences'
    # prefill chunks and decodes together), every sequence sampled
    tokens = min(config.max_num_batched_tokens, config.max_num_seqs * loaded.max_model_len)
    activation = profile_step_peak(loaded.model, layout, tokens, config.max_num_seqs, device)
    # Cached-but-free allocator blocks (temporaries of weight loading: dtype casts, random init)
    # count as used in mem_get_info: hand them back first, so the pool gets that room.
    torch.cuda.empty_cache()
    loaded_bytes = torch.cuda.memory_allocated(device) - allocated_before
    # The plan charges the RoPE table from the context (0.5 GiB at 1M), not as weights (read each step)
    weights = loaded_bytes - rope_table_bytes(loaded.model)
    runtime = runtime_bytes_beside(config, device, loaded_bytes)
    # the most rows a captured graph runs (the record's; 0 without graphs) sizes the graphs' scratch
    scratch = dequant_scratch_bytes(loaded.model, loaded.dtype, graph_rows)
    pairs = held_scale_pair_bytes(loaded.model)  # inside `weights`, read by batched steps only
    return Measured(weights, activation, runtime, graph_scratch_bytes=scratch, scale_pair_bytes=pairs)


def sized_spec(config: EngineConfig, loaded_config: dict, device_type: str) -> ModelSpec:
    """The shapes the tiers are planned with: the loaded model's config (its RoPE and context
    options applied) and, for a GGUF file kept in its blocks, the file's weight storage (no one
    float width, its bytes, its main quantized type), which the config alone does not carry: from
    the config a Q4_K_M 8B read as dense at HBM bandwidth, its plan 1.5x too fast
    (bench/results/2026-12-04-h200-words-x-in-place)."""
    spec = ModelSpec.from_hf_config(loaded_config)
    # a random model's format is its name's (plan/startup._weight_format); a dequantized one is dense
    in_blocks = not is_random_model(config.model) and keeps_gguf_quantized(config, device_type)
    if not in_blocks or resolve_model(config.model).kind != "gguf":
        return spec
    return spec.with_stored_weights(ModelSpec.from_model_arg(config.model))


def _size_tiers(
    config: EngineConfig,
    choices: RuntimeChoices,
    loaded: LoadedModel,
    layout: KVLayout,
    device: torch.device,
    allocated_before: int,
    calibration: Bandwidths | None,
) -> MemoryPlan:
    """The plan, with what was measured, that the tiers are allocated from."""
    graph_rows = max(choices.graph_batch, choices.mixed_graph_tokens)  # the decode and mixed graphs' pool
    measured = _measure(config, graph_rows, loaded, layout, device, allocated_before)
    spec = sized_spec(config, loaded.hf_config.to_dict(), device.type)
    startup = _plan(config, device, calibration, (measured, spec, loaded.max_model_len))
    assert startup is not None, "a plan with a device budget always exists after loading"
    plan = startup.plan
    reserves = plan.reserve_bytes
    left = plan.usable_vram_bytes - plan.weight_bytes - plan.activation_peak_bytes - reserves
    logger.info(
        "KV pool: budget %.2f GiB - weights %.2f GiB - activations %.2f GiB - reserves %.2f GiB = %.2f GiB%s",
        plan.usable_vram_bytes / GIB,
        plan.weight_bytes / GIB,
        plan.activation_peak_bytes / GIB,
        reserves / GIB,
        left / GIB,
        # a fixed size (--num-kv-blocks, --kv-cache-memory, --hot-kv-tokens) takes less than that
        ""
        if plan.gpu_kv_bytes + plan.block_bytes > left
        else f"; the pool's fixed size: {plan.gpu_kv_bytes / GIB:.2f} GiB",
    )
    logger.info("memory: %s%s", fit_line(plan), _why_tiers(config, plan))
    num_blocks = plan.gpu_kv_tokens // config.block_size
    if num_blocks < 2:
        raise OutOfKVMemoryError(
            f"No memory is left for the KV cache: one block needs {layout.block_bytes} bytes.\n"
            + startup.table
            + "\nLower --max-num-batched-tokens, raise --vram-budget or --gpu-memory-utilization, "
            "or use a smaller model."
        )
    blocks_per_seq = -(-loaded.max_model_len // config.block_size)
    if (
        num_blocks + plan.cpu_kv_tokens // config.block_size + plan.disk_kv_tokens // config.block_size
        < blocks_per_seq
    ):
        logger.warning(
            "the KV tiers hold %d tokens, fewer than --max-model-len %d: long requests will be "
            "preempted or refused; lower --max-model-len or give the cache more memory",
            plan.gpu_kv_tokens + plan.cpu_kv_tokens + plan.disk_kv_tokens,
            loaded.max_model_len,
        )
    return plan


def _why_tiers(config: EngineConfig, plan: MemoryPlan) -> str:
    """Why the cold tiers have the size they have, where the mode chose it (no size given)."""
    chosen = []
    if config.cpu_kv_budget_bytes is None and plan.cpu_kv_bytes:
        chosen.append("the cpu tier (--cpu-kv-budget sets it)")
    if config.disk_kv_budget_bytes is None and plan.disk_kv_bytes:
        chosen.append("the disk tier (--disk-kv-budget sets it)")
    return f" [--mode {config.mode} sized {' and '.join(chosen)}]" if chosen else ""


def _prepare_kernels(
    config: EngineConfig,
    choices: RuntimeChoices,
    loaded: LoadedModel,
    storage: KVStorage,
    device: torch.device,
    phases: StartupPhases,
) -> DecodeGraphs | None:
    """What the first steps would otherwise pay for: the CPU attention kernel on the CPU device,
    the decode CUDA graphs on CUDA (None where the record says steps run eagerly: --enforce-eager,
    offloaded weights, which swap layers host-side (model/offload.py), or tensor parallelism with
    KVSPILL_TP_CUDA_GRAPHS=0; with it, graphs capture the NCCL collectives too, every rank in the
    same order, each rank building its parts alike)."""
    if device.type == "cpu":
        # The decode kernel over the pool in RAM (runner/host_decode.py) is built by g++ on first
        # use (seconds, once per host): here, not in the first request's first decode step.
        with phases.phase("build the CPU attention kernel"):
            load_kernel()
        with phases.phase("build the CPU decode ops kernel"):  # RMSNorm, RoPE, K/V store
            load_decode_ops_kernel()
        if quantized_weights(loaded.model):  # GGUF blocks kept: their kernel (kernels/cpu_gguf.py)
            with phases.phase("build the CPU GGUF kernel"):
                load_gguf_kernel()
        return None
    if not choices.decode_graphs:
        return None
    assert loaded.offloader is None, "offloaded weights run eagerly (ChoiceFlags.enforce_eager)"
    with phases.phase("capture CUDA graphs"):
        graphs = DecodeGraphs(
            loaded.model,
            storage,
            scale=loaded.head_dim**-0.5,
            max_num_seqs=choices.graph_batch,
            max_blocks_per_seq=-(-loaded.max_model_len // config.block_size),
        )
        graphs.capture()
        return graphs


def _capture_mixed_graphs(
    config: EngineConfig, choices: RuntimeChoices, graphs: DecodeGraphs | None, phases: StartupPhases
) -> MixedGraphs | None:
    """The mixed-step CUDA graphs the record chose (`RuntimeChoices.mixed_graph_tokens`), in the
    decode graphs' memory pool; None without decode graphs or with KVSPILL_MIXED_CUDA_GRAPHS=0."""
    if graphs is None or not choices.mixed_graph_tokens:
        return None
    with phases.phase("capture mixed-step CUDA graphs"):
        mixed = MixedGraphs(
            graphs, prefill_floor_tokens(config.block_size), mixed_decodes(config.max_num_seqs)
        )
        mixed.capture()
        return mixed


def runtime_choices(
    config: EngineConfig,
    facts: DeviceFacts,
    calibration: Bandwidths | None,
    kv_dtype: torch.dtype,
    head_dim: int,
) -> RuntimeChoices:
    """The engine's record of runtime choices (plan/choices.py) for a pool of `kv_dtype` and
    `head_dim`: the same function the plan calls with its request (tests/plan/test_choices_agree.py)."""
    return resolve_choices(config, facts, calibration, kv_format=kv_format_of(kv_dtype), head_dim=head_dim)


def _config_eos(hf_config: object) -> frozenset[int]:
    """End-of-sequence ids from the model config alone (no tokenizer loaded)."""
    eos = getattr(hf_config, "eos_token_id", None)
    return frozenset([eos] if isinstance(eos, int) else eos or [])


def uses_async_scheduling(config: EngineConfig, device: torch.device) -> bool:
    """Whether the engine launches step N+1 before reading step N (every rank decides alike)."""
    return device.type == "cuda" if config.async_scheduling is None else config.async_scheduling


def _load(
    config: EngineConfig, device: torch.device, dtype: torch.dtype, tp: TensorParallel, scale_pairs: bool
) -> tuple[LoadedModel, TokenizerBundle | None]:
    """The model and its tokenizer; with `scale_pairs` (`_keeps_scale_pairs`), the Q4_K weights'
    scale pairs for batched steps."""
    loaded, tokenizer = _load_model(config, device, dtype, tp)
    if device.type == "cuda" and q6k_split_on() and loaded.offloader is None:  # offloaded: not measured
        moved = split_q6k_weights(loaded.model)
        logger.info("Q6_K weights in the split layout: %d (KVSPILL_Q6K_SPLIT=0: gguf's layout)", moved)
    if scale_pairs:
        added = attach_scale_pairs(loaded.model, dtype)
        if added:
            logger.info(
                "Q4_K scale pairs for batched steps: %.2f GiB (KVSPILL_SCALE_PAIRS=0: none)", added / GIB
            )
    return loaded, tokenizer


def _load_model(
    config: EngineConfig, device: torch.device, dtype: torch.dtype, tp: TensorParallel
) -> tuple[LoadedModel, TokenizerBundle | None]:
    if config.cpu_offload_gb and device.type != "cuda":
        raise InvalidParameterError(
            "cpu_offload_gb",
            "--cpu-offload-gb moves weights off a CUDA GPU; on the CPU they are in RAM already",
        )
    if is_random_model(config.model):
        assert config.model is not None
        offload = int(config.cpu_offload_gb * GIB)
        return build_random_model(config.model, device, dtype, config.max_model_len, offload, tp), None
    resolved = resolve_model(config.model)
    keep_quantized = keeps_gguf_quantized(config, device.type)
    if config.quantization == "fp8" and resolved.kind == "gguf":
        raise InvalidParameterError(
            "quantization",
            "--quantization fp8 converts a bf16/fp16 checkpoint: a GGUF file stays in its own format (--quantization gguf)",
        )
    check_int4_format(config, resolved.kind)
    if config.quantization == "gguf" and resolved.kind != "gguf":
        raise InvalidParameterError(
            "quantization",
            f"--quantization gguf needs a .gguf model file; {resolved.display_name} is not one",
        )
    loaded = load_model(
        resolved,
        device,
        dtype,
        config.rope_scaling,
        config.max_model_len,
        keep_quantized=keep_quantized,
        cpu_offload_bytes=int(config.cpu_offload_gb * GIB),
        fp8=config.quantization == "fp8",
        tp=tp,
    )
    if config.skip_tokenizer_init:
        return loaded, None
    tokenizer = _tokenizer(config, resolved, loaded)
    return loaded, replace(
        tokenizer, sampling_defaults=_sampling_defaults(resolved, config.generation_config)
    )


def _tokenizer(config: EngineConfig, resolved: ResolvedModel, loaded: LoadedModel) -> TokenizerBundle:
    """The model's tokenizer, or --tokenizer's, whose ids must fit the model's vocabulary."""
    if config.tokenizer is None:
        return load_tokenizer(resolved, loaded.hf_config)
    tokenizer = load_tokenizer(resolve_tokenizer(config.tokenizer), loaded.hf_config)
    vocab = int(loaded.hf_config.vocab_size)
    if len(tokenizer.hf) > vocab:
        raise UnsupportedModelError(
            f"--tokenizer {config.tokenizer} has {len(tokenizer.hf)} tokens, more than the "
            f"{vocab} of {resolved.display_name}'s vocabulary: give the tokenizer of this model (its base model)"
        )
    logger.info("tokenizer and chat template from %s (--tokenizer)", config.tokenizer)
    return tokenizer


def _sampling_defaults(resolved: ResolvedModel, source: str) -> dict[str, float | int]:
    """The model's recommended sampling values (text/sampling_defaults.py), said once at start-up."""
    defaults = model_sampling_defaults(resolved, source)
    if defaults:
        where = {"dir": "generation_config.json", "gguf": "the GGUF's general.sampling.*"}[resolved.kind]
        logger.info(
            "sampling defaults from %s: %s (a request's own values win; --generation-config none: OpenAI's)",
            where if source == "auto" else source,
            describe(defaults),
        )
    return defaults


def _read_chat_template(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise InvalidParameterError("chat_template", f"cannot read --chat-template {path!r}: {e}") from e


def _prelude(
    config: EngineConfig, phases: StartupPhases, tp: TensorParallel
) -> tuple[EngineConfig, torch.device, torch.dtype, DeviceFacts, Bandwidths | None]:
    """Device, dtype and the config as the engine runs it; the machine's facts and the saved
    calibration, each read once; pre-flight checks before anything is loaded."""
    with phases.phase("device and pre-flight"):
        device = pick_device(config, tp)
        use_expandable_segments(device, tp)
        dtype = pick_dtype(config, device)  # the plans count bytes at the dtype the engine runs
        config = replace(config, dtype=str(dtype).removeprefix("torch."))
        config = with_attention_mode(config, device.type)  # --attention cpu on a GPU: via the tiers
        # extended/extreme: the context and RoPE scaling of the mode, before anything loads
        config = mode_config(config, device.type, _card(device)[0], host_room(config))
        check_kv_cache_dtype(config, device)  # before loading anything
        if not is_random_model(config.model):
            # found and readable (headers only: a GGUF cut short or in a type kvspill cannot read),
            # before the memory plan is printed
            resolve_model(config.model)
        preflight(config)
        facts = DeviceFacts.read(device.type, _card(device)[0], tp.size)
        calibration = load_calibration()  # read once: the plans and the cold path use it
    return config, device, dtype, facts, calibration


def _allocate(
    config: EngineConfig, plan: MemoryPlan, layout: KVLayout, device: torch.device, tp: TensorParallel
) -> TieredKVStorage:
    """The tiers of the plan, block for block; every rank holds the same block ids (the smallest
    tiers of any rank), since the scheduler is shared."""
    bs = config.block_size
    num_gpu, num_cpu, num_disk = tp.min_over_ranks(
        [plan.gpu_kv_tokens // bs, plan.cpu_kv_tokens // bs, plan.disk_kv_tokens // bs]
    )
    storage = TieredKVStorage(
        layout, num_gpu, device, num_cpu_blocks=num_cpu, num_disk_blocks=num_disk, disk_dir=config.kv_disk_dir
    )
    logger.info(
        "KV tiers: gpu %d blocks (%.2f GiB, %s), cpu %d blocks (%.2f GiB%s), disk %d blocks (%.2f GiB) of %d tokens",
        storage.num_blocks,
        storage.nbytes / GIB,
        storage.device,
        storage.num_cpu_blocks,
        storage.host_nbytes / GIB,
        ", pinned" if storage.cpu_pinned else "",
        storage.num_disk_blocks,
        storage.disk_nbytes / GIB,
        bs,
    )
    return storage


def _fingerprint(
    config: EngineConfig, loaded: LoadedModel, layout: KVLayout, dtype: torch.dtype, tp: TensorParallel
) -> int:
    """Seeds the prefix hashes; persisted blocks of another model, format or rank never match."""
    return kv_fingerprint(
        {
            **model_identity(config.model),
            "hf_config": loaded.hf_config.to_dict(),
            "quantization": config.quantization,
            "dtype": str(dtype),
            "kv_dtype": str(layout.dtype),
            "kv_cache_dtype": config.kv_cache_dtype,
            **({"kv_layer_dtypes": [str(d) for d in layout.layer_dtypes]} if layout.mixed else {}),
            "rope_scaling": config.rope_scaling,
            "layout": [layout.num_layers, layout.block_size, layout.num_kv_heads, layout.head_dim],
            # int8 blocks of the earlier row layout have the same shape and dtype (kv_quant.int8_planes)
            **({"int8_block_layout": "planes"} if layout.dtype == torch.int8 else {}),
            "tensor_parallel": [tp.rank, tp.size],  # a rank holds its own KV heads
        }
    )


def _build_runner(
    config: EngineConfig,
    choices: RuntimeChoices,
    loaded: LoadedModel,
    storage: TieredKVStorage,
    tokenizer: TokenizerBundle | None,
    eos_token_ids: frozenset[int],
    graphs: tuple[DecodeGraphs | None, MixedGraphs | None],
    device: torch.device,
) -> ModelRunner:
    """The runner on the model's `device`, given the cold path and its graphs (decode, mixed) as
    the record chose them."""
    return ModelRunner(
        loaded.model,
        storage,
        head_dim=loaded.head_dim,
        eos_token_ids=eos_token_ids,
        seed=config.seed,
        guided=GuidedCompiler(tokenizer.hf, loaded.vocab_size, eos_token_ids)
        if tokenizer is not None
        else None,
        graphs=graphs[0],
        mixed_graphs=graphs[1],
        device=device,
        cold_config=cold_config(config, choices, device, -(-loaded.max_model_len // config.block_size)),
        cold_graphs=choices.cold_graphs,
    )


def build_engine_parts(
    config: EngineConfig, phases: StartupPhases | None = None, tp: TensorParallel = SINGLE
) -> EngineParts:
    """Everything one rank runs (the whole engine's with one rank): every rank of a tensor-parallel
    group calls this alike, so their collectives (profiling, agreeing on tier sizes) match."""
    phases = phases or StartupPhases()
    config, device, dtype, facts, calibration = _prelude(config, phases, tp)
    with shared_readers():  # a .gguf file is parsed once for the plan, config, tokenizer and weights
        with phases.phase("memory plan"):
            startup = _plan_and_cap(config, device, calibration)
        allocated_before = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
        with phases.phase("load weights and tokenizer"):
            loaded, tokenizer = _load(config, device, dtype, tp, _keeps_scale_pairs(config, device, startup))
    if tokenizer is not None:
        override = _read_chat_template(config.chat_template) if config.chat_template is not None else None
        # the embedded model also when it is given by its path
        embedded = config.model is None or Path(config.model).name == EMBEDDED_FILE
        chosen = choose_chat_template(tokenizer.chat_template, override, embedded)
        tokenizer = replace(tokenizer, chat_template=chosen)
    eos_token_ids = tokenizer.eos_token_ids if tokenizer is not None else _config_eos(loaded.hf_config)
    # this rank's kv heads in every tier; skipped layers at the model dtype (storage/layout.py)
    layout = engine_layout(config, loaded.num_layers, loaded.num_kv_heads // tp.size, loaded.head_dim, dtype)
    choices = runtime_choices(config, facts, calibration, layout.dtype, layout.head_dim)
    with phases.phase("measure and size the KV tiers"):
        plan = _size_tiers(config, choices, loaded, layout, device, allocated_before, calibration)
    with phases.phase("allocate the KV tiers"):
        storage = _allocate(config, plan, layout, device, tp)
    if not storage.cpu_pinned:  # a fact known only now: the cold graphs read the cpu tier in place
        facts = replace(facts, cpu_pool_pinned=False)
        choices = runtime_choices(config, facts, calibration, layout.dtype, layout.head_dim)
    graphs = _prepare_kernels(config, choices, loaded, storage, device, phases)
    mixed = _capture_mixed_graphs(config, choices, graphs, phases)
    runner = _build_runner(
        config, choices, loaded, storage, tokenizer, eos_token_ids, (graphs, mixed), device
    )
    cap_allocator(config, device, leave_runtime=True, step_bytes=plan.activation_peak_bytes)
    return EngineParts(
        runner=runner,
        storage=storage,
        tokenizer=tokenizer,
        eos_token_ids=eos_token_ids,
        loaded=loaded,
        memory_plan=plan,
        num_blocks=storage.num_blocks,
        max_model_len=loaded.max_model_len,
        vocab_size=loaded.vocab_size,
        device=device,
        dtype=dtype,
        kv_fingerprint=_fingerprint(config, loaded, layout, dtype, tp),
        choices=choices,
    )

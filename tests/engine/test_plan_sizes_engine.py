"""The memory plan sizes the engine: the plan's gpu/cpu/disk tokens are the engine's tiers, to the block.

The engine builds its tiers from `plan.startup.startup_plan` with what it measured after loading
(engine/setup.py); `kvspill plan` makes the same plan from the model's shapes before loading. On
the CPU the measured weights are the parameters' bytes, which the shapes give exactly, so both
plans and `kv_stats()` agree block for block.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from kvspill.config import EngineConfig
from kvspill.engine.core import LLMEngine
from kvspill.plan.startup import startup_plan

MiB = 2**20


def _tier_tokens(engine: LLMEngine) -> dict[str, int]:
    stats = engine.kv_stats()
    data = stats.to_json() if hasattr(stats, "to_json") else stats
    return {name: tier["blocks"] * data["block_size"] for name, tier in data["tiers"].items()}


def _plan_tokens(plan) -> dict[str, int]:
    return {"gpu": plan.gpu_kv_tokens, "cpu": plan.cpu_kv_tokens, "disk": plan.disk_kv_tokens}


CASES = {
    "gpu tier from a 256 MiB budget": ("tiny_llama_dir", dict(vram_budget_bytes=256 * MiB)),
    "budget, fixed kv size, cpu tier": (
        "tiny_qwen2_dir",
        dict(vram_budget_bytes=256 * MiB, kv_cache_memory_bytes=MiB, cpu_kv_budget_bytes=3 * MiB),
    ),
    "cpu and disk tiers, fp32": (
        "tiny_qwen3_dir",
        dict(
            kv_cache_memory_bytes=MiB,
            cpu_kv_budget_bytes=2 * MiB,
            disk_kv_budget_bytes=5 * MiB,
            dtype="float32",
        ),
    ),
    "block size 32, small chunk, exact cpu blocks": (
        "tiny_llama_dir",
        dict(vram_budget_bytes=300 * MiB, block_size=32, max_num_batched_tokens=64, num_cpu_kv_blocks=7),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_plan_tokens_equal_the_engines_tiers(
    case: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    fixture, options = CASES[case]
    model_dir = request.getfixturevalue(fixture)
    config = EngineConfig(
        model=str(model_dir), device="cpu", max_model_len=256, kv_disk_dir=str(tmp_path), **options
    )
    engine = LLMEngine(config)
    engine_tiers = _tier_tokens(engine)
    assert _plan_tokens(engine.memory_plan) == engine_tiers
    assert engine_tiers["gpu"] > 0
    if options.get("cpu_kv_budget_bytes") or options.get("num_cpu_kv_blocks"):
        assert engine_tiers["cpu"] > 0
    if options.get("disk_kv_budget_bytes"):
        assert engine_tiers["disk"] > 0
    # The plan `kvspill plan` makes from the shapes alone, before anything is loaded.
    # (at the dtype the engine picked: on the CPU "auto" is measured, fp16 or fp32)
    resolved = replace(config, dtype=str(engine.bundle.dtype).removeprefix("torch."))
    before = startup_plan(resolved, None, None, device="cpu", host_available_bytes=64 * 2**30)
    assert before is not None
    assert _plan_tokens(before.plan) == engine_tiers
    assert before.plan.weight_bytes == engine.memory_plan.weight_bytes


def test_fixed_kv_size_is_never_more_than_the_budget_leaves(tiny_llama_dir: Path) -> None:
    """A --kv-cache-memory larger than what the budget leaves gets what is left (the plan's rule)."""
    config = EngineConfig(
        model=str(tiny_llama_dir), device="cpu", max_model_len=256,
        vram_budget_bytes=256 * MiB, kv_cache_memory_bytes=2**40,
    )  # fmt: skip
    engine = LLMEngine(config)
    plan = engine.memory_plan
    assert plan.gpu_kv_bytes <= 256 * MiB - plan.weight_bytes - plan.activation_peak_bytes
    assert _tier_tokens(engine)["gpu"] == plan.gpu_kv_tokens


def test_a_gguf_kept_in_blocks_is_planned_with_the_files_weights(
    smollm2_gguf_path: Path, tiny_llama_dir: Path
) -> None:
    # The loaded config names a float dtype; the file holds quantized blocks, which set the plan's
    # weight read rate (plan/weights.weight_read_gbs): on the GPU the sized plan must see them.
    from kvspill.engine.setup import sized_spec
    from kvspill.gguf.cache import gguf_hf_config
    from kvspill.plan.host_rates import cpu_keeps_gguf_blocks
    from kvspill.plan.spec import ModelSpec
    from kvspill.plan.weights import weight_read_gbs

    loaded = gguf_hf_config(smollm2_gguf_path).to_dict()
    config = EngineConfig(model=str(smollm2_gguf_path))
    on_gpu = sized_spec(config, loaded, "cuda")
    from_file = ModelSpec.from_gguf(smollm2_gguf_path)
    assert on_gpu.gguf_main_type == from_file.gguf_main_type is not None
    assert on_gpu.stored_weight_bytes == from_file.stored_weight_bytes and on_gpu.weight_dtype_bytes is None
    assert on_gpu.num_layers == from_file.num_layers and weight_read_gbs(on_gpu, "gguf") is not None
    # The CPU keeps the blocks too where its GGUF kernel runs fast (plan/host_rates.cpu_keeps_gguf_blocks).
    on_cpu = sized_spec(config, loaded, "cpu")
    assert on_cpu == (on_gpu if cpu_keeps_gguf_blocks() else ModelSpec.from_hf_config(loaded))
    # Dequantized (--quantization none) and not a GGUF: the loaded config as it is.
    assert sized_spec(replace(config, quantization="none"), loaded, "cpu") == ModelSpec.from_hf_config(loaded)
    assert sized_spec(replace(config, quantization="none"), loaded, "cuda") == ModelSpec.from_hf_config(
        loaded
    )
    dense = (tiny_llama_dir / "config.json").read_text()
    dense_config = json.loads(dense)
    assert sized_spec(
        EngineConfig(model=str(tiny_llama_dir)), dense_config, "cuda"
    ) == ModelSpec.from_hf_config(dense_config)

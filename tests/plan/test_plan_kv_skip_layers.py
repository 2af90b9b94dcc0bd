"""The plan counts --kv-cache-dtype-skip-layers: kept layers at the weights' dtype, the rest in the
format, in the request, from an engine config, and in `kvspill plan`'s table."""

from __future__ import annotations

import json

import typer
from typer.testing import CliRunner

from kvspill.cli.plan_cmd import register
from kvspill.config import EngineConfig
from kvspill.plan import PlanRequest, request_from_engine_config
from kvspill.plan.spec import KNOWN_SHAPES
from kvspill.plan.units import GiB

LLAMA_8B = KNOWN_SHAPES["llama-8b"]  # 32 layers, 8 kv heads of 128: 4 KiB a layer and token in bf16


def _request(**kw) -> PlanRequest:
    return PlanRequest(spec=LLAMA_8B, vram_budget_bytes=24 * GiB, context_len=131072, **kw)


def test_kept_layers_count_at_the_weights_dtype():
    assert _request(kv_dtype="fp8").kv_bytes_per_token == 32 * 2048
    assert _request(kv_dtype="fp8", kv_skip_layers=4).kv_bytes_per_token == 28 * 2048 + 4 * 4096
    assert _request(kv_dtype="int8", kv_skip_layers=1).kv_bytes_per_token == 31 * 2 * 8 * 132 + 4096
    assert _request(kv_dtype="fp8", kv_skip_layers=40).kv_bytes_per_token == 32 * 4096  # all of them
    assert _request(kv_skip_layers=4).kv_bytes_per_token == 32 * 4096  # auto: nothing to keep


def test_the_engines_request_carries_its_skip_list():
    config = EngineConfig(kv_cache_dtype="fp8", kv_cache_dtype_skip_layers=(0, 31))
    request = request_from_engine_config(config, LLAMA_8B, 24 * GiB)
    assert request.kv_skip_layers == 2 and request.kv_bytes_per_token == 30 * 2048 + 2 * 4096


def test_kvspill_plan_shows_the_kept_layers_and_holds_fewer_gpu_tokens():
    app = typer.Typer()
    register(app)
    args = ["llama-8b", "--vram-budget", "24GiB", "--context", "128K", "--kv-cache-dtype", "fp8"]
    skip = ["--kv-cache-dtype-skip-layers", "0,1,30,31"]
    table = CliRunner().invoke(app, [*args, *skip])
    assert table.exit_code == 0, table.output
    assert "72.0 KiB fp8, 4 layers kept" in table.output
    plans = [
        json.loads(CliRunner().invoke(app, [*args, *extra, "--json"]).output)["plans"]["default"]
        for extra in ([], skip)
    ]
    assert [p["kv_bytes_per_token"] for p in plans] == [65536, 73728]
    assert plans[1]["request"]["kv_skip_layers"] == 4
    assert plans[1]["gpu_kv_tokens"] < plans[0]["gpu_kv_tokens"]

"""The engine flags, declared once (`kvspill/options.py`, shown to typer by `cli/engine_options.py`): one per EngineConfig field,
the same set on every engine command, from the command line or `KVSPILL_<FLAG>`, into EngineConfig;
a bad value is one line and exit 2. No model is loaded here."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import click
import pytest
import typer
from typer.testing import CliRunner

from kvspill.cli import main as cli_main
from kvspill.cli import serve_cmd
from kvspill.cli.engine_options import PANEL
from kvspill.config import EngineConfig
from kvspill.errors import InvalidParameterError, KvspillError
from kvspill.options import EngineOptions, config_field, engine_config, engine_kwargs, flag_name

# EngineConfig fields without an engine flag, and why.
EXEMPT = {
    "model": "each command's own --model option or MODEL argument, as before",
    "trust_remote_code": "its only valid value is the default (False): kvspill never runs model code",
}
ENGINE_COMMANDS = [
    ("serve",),
    ("generate",),
    ("chat",),
    ("plan",),
    ("bench", "progressive"),
    ("bench", "stability"),
    ("bench", "compare"),
    ("eval",),
]
# Every flag these commands took before the engine flags were declared once (users' scripts).
OLD_ENGINE_FLAGS = (
    "--device --dtype --max-model-len --block-size --max-num-batched-tokens --max-num-seqs --rope-scaling "
    "--enforce-eager --vram-budget --gpu-memory-utilization --cpu-kv-budget --disk-kv-budget "
    "--kv-disk-dir --attention --cpu-attention-threads"
).split()
OLD_OWN_FLAGS = {
    ("serve",): "--host --port --api-key --max-waiting-requests --max-queued-tokens --shutdown-timeout "
    "--served-model-name --async-scheduling --no-async-scheduling",
    ("generate",): "--model -m --max-tokens --temperature --top-p --top-k --seed --stop --chat --stream",
    ("chat",): "--model -m --max-tokens --temperature --top-p --top-k --seed --system",
    ("plan",): "--ram-budget --context --kv-dtype --gpu --json",
    ("eval",): "--model -m --lengths --tasks --samples --seed --out --label --engine-arg --hot-kv-tokens "
    "--teacher-forced --no-teacher-forced --combine",
    ("bench", "progressive"): "--model --out --url --api-key --contexts --start-context --max-context "
    "--new-tokens --seed --warmup --cold-attention --hot-window-tokens",
    ("bench", "stability"): "--model --out --url --duration --concurrency --context-range --max-rss-growth "
    "--max-gpu-growth --cold-attention --hot-window-tokens",
    (
        "bench",
        "compare",
    ): "--model --out --configs --url --contexts --tier-cap --cold-attention --hot-window-tokens",
}


@pytest.fixture(scope="module")
def group() -> click.Group:
    cli_main._register_commands()
    return typer.main.get_command(cli_main.app)  # type: ignore[return-value]


def _command(group: click.Group, path: tuple[str, ...]) -> click.Command:
    command: click.Command = group
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
    return command


def _opts(params: list[click.Parameter]) -> set[str]:
    return {o for p in params for o in (*p.opts, *p.secondary_opts)}


def _engine_params(command: click.Command) -> list[click.Parameter]:
    return [p for p in command.params if getattr(p, "rich_help_panel", None) == PANEL]


def test_every_engine_config_field_has_a_flag():
    targets = {config_field(f.name) for f in fields(EngineOptions)}
    config_fields = {f.name for f in fields(EngineConfig)}
    missing = sorted(config_fields - targets - set(EXEMPT))
    assert not missing, f"EngineConfig fields without a flag in kvspill/options.py: {missing}"
    assert targets <= config_fields, f"flags for no EngineConfig field: {sorted(targets - config_fields)}"
    assert not targets & set(EXEMPT), "an exempt field has a flag: drop it from EXEMPT"
    assert len(targets) == len(fields(EngineOptions)), "two flags set the same field"


@pytest.mark.parametrize("path", ENGINE_COMMANDS, ids=" ".join)
def test_every_engine_command_takes_the_same_engine_flags(group, path):
    command = _command(group, path)
    engine = _engine_params(command)
    assert {p.name for p in engine} == {f.name for f in fields(EngineOptions)}
    for p in engine:
        assert p.opts == [flag_name(p.name)], p.opts
        assert p.envvar == f"KVSPILL_{p.name.upper()}"
        assert "(default: " in (p.help or ""), p.name
    assert {"--cold-attention", "--hot-window-tokens", "--num-sink-blocks"} <= _opts(engine)
    # Every flag of before still parses here (users' scripts).
    missing = {*OLD_ENGINE_FLAGS, *OLD_OWN_FLAGS[path].split()} - _opts(command.params)
    assert not missing, missing


def test_the_help_of_every_engine_command_lists_them(group):
    wanted = [flag_name(f.name) for f in fields(EngineOptions)]
    for path in ENGINE_COMMANDS:
        # A wide terminal, so that rich does not wrap or cut a flag name.
        result = CliRunner().invoke(cli_main.app, [*path, "--help"], env={"COLUMNS": "300"})
        assert result.exit_code == 0, result.output
        missing = [flag for flag in wanted if flag not in result.output]
        assert not missing, (path, missing)


def test_every_flag_maps_to_its_engine_config_field():
    options = EngineOptions(
        mode="extended",
        device="cpu",
        dtype="float32",
        max_model_len=4096,
        block_size=32,
        max_num_batched_tokens=512,
        max_num_seqs=4,
        rope_scaling="yarn:4",
        enforce_eager=True,
        async_scheduling=False,
        kernel_warmup=False,
        target_itl_ms=40.0,
        enable_prefix_caching=False,
        skip_tokenizer_init=True,
        quantization="none",
        chat_template="/tmp/t.jinja",
        tokenizer="/tmp/tok",
        engine_seed=7,
        generation_config="vllm",
        vram_budget="1GiB",
        gpu_memory_utilization=0.5,
        cpu_offload_gb=1.5,
        kv_cache_memory="512MiB",
        num_kv_blocks=64,
        cpu_kv_budget="2GiB",
        cpu_kv_ram_share=0.3,
        disk_kv_budget="3GiB",
        kv_disk_dir="/tmp/kv",
        kv_persist_dir="/tmp/persist",
        kv_persist_budget="4GiB",
        kv_pin_share=0.25,
        num_cpu_kv_blocks=8,
        num_disk_kv_blocks=9,
        num_sink_blocks=2,
        hot_window_tokens=256,
        context_shift=False,  # True refuses the cold tiers set here
        context_shift_keep="1K",
        context_shift_overlap="64",
        attention="cpu",
        cold_attention="split",
        sparse_budget_tokens="2K",
        sparse_cache_seqs=2,
        sparse_prompt_window="64",
        sparse_prompt_share=0.25,
        cpu_attention_threads=3,
        kv_cache_dtype="fp8",
        kv_cache_dtype_skip_layers="3, 0",
        tensor_parallel_size=1,  # more ranks refuse --attention cpu and --cpu-offload-gb
    )
    assert all(getattr(options, f.name) is not None for f in fields(EngineOptions)), "set every flag"
    config = engine_config(options, "some/model")
    assert config == EngineConfig(
        model="some/model",
        mode="extended",
        device="cpu",
        dtype="float32",
        max_model_len=4096,
        block_size=32,
        max_num_batched_tokens=512,
        max_num_seqs=4,
        rope_scaling={"rope_type": "yarn", "factor": 4.0},
        enforce_eager=True,
        async_scheduling=False,
        kernel_warmup=False,
        target_itl_ms=40.0,
        enable_prefix_caching=False,
        skip_tokenizer_init=True,
        quantization="none",
        chat_template="/tmp/t.jinja",
        tokenizer="/tmp/tok",
        seed=7,
        generation_config="vllm",
        vram_budget_bytes=2**30,
        gpu_memory_utilization=0.5,
        cpu_offload_gb=1.5,
        kv_cache_memory_bytes=512 * 2**20,
        num_kv_blocks=64,
        cpu_kv_budget_bytes=2 * 2**30,
        cpu_kv_ram_share=0.3,
        disk_kv_budget_bytes=3 * 2**30,
        kv_disk_dir="/tmp/kv",
        kv_persist_dir="/tmp/persist",
        kv_persist_budget_bytes=4 * 2**30,
        kv_pin_share=0.25,
        num_cpu_kv_blocks=8,
        num_disk_kv_blocks=9,
        num_sink_blocks=2,
        hot_window_tokens=256,
        context_shift=False,
        context_shift_keep=1024,
        context_shift_overlap=64,
        attention="cpu",
        cold_attention="split",
        sparse_budget_tokens=2048,
        sparse_cache_seqs=2,
        sparse_prompt_window=64,
        sparse_prompt_share=0.25,
        cpu_attention_threads=3,
        kv_cache_dtype="fp8",
        kv_cache_dtype_skip_layers=(0, 3),
    )


def test_flags_left_out_take_engine_config_defaults():
    assert engine_kwargs(EngineOptions()) == {}
    assert engine_config(EngineOptions()) == EngineConfig()


def _serve_app() -> typer.Typer:
    app = typer.Typer()
    serve_cmd.register(app)
    app.command("noop")(lambda: None)  # two commands: `serve` stays a subcommand
    return app


def test_flags_and_env_vars_reach_serve(monkeypatch):
    calls: list[tuple] = []
    monkeypatch.setattr(serve_cmd, "run_server", lambda *a: calls.append(a))
    env = {
        "KVSPILL_COLD_ATTENTION": "cpu",
        "KVSPILL_CPU_KV_BUDGET": "1GiB",
        "KVSPILL_NUM_SINK_BLOCKS": "3",
        "KVSPILL_ENFORCE_EAGER": "true",
        "KVSPILL_ENABLE_PREFIX_CACHING": "0",
        "KVSPILL_HOT_WINDOW_TOKENS": "64",
    }
    args = ["serve", "m", "--device", "cpu", "--hot-window-tokens", "128", "--no-async-scheduling"]
    out = CliRunner().invoke(_serve_app(), args, env=env)
    assert out.exit_code == 0, out.output
    config: EngineConfig = calls[0][0]
    assert (config.model, config.device, config.async_scheduling) == ("m", "cpu", False)
    assert config.cold_attention == "cpu" and config.cpu_kv_budget_bytes == 2**30
    assert config.num_sink_blocks == 3 and config.enforce_eager and not config.enable_prefix_caching
    assert config.hot_window_tokens == 128  # the command line wins over KVSPILL_HOT_WINDOW_TOKENS


def test_flags_reach_generate_and_the_bench_suites(monkeypatch, tmp_path):
    from kvspill.cli import bench_suites_cmd

    seen: list[EngineConfig] = []

    def record(model, engine, *rest):
        seen.append(engine_config(engine, model))
        raise KvspillError("recorded")

    monkeypatch.setattr(cli_main, "_make_llm", record)
    monkeypatch.setattr(
        bench_suites_cmd, "_target", lambda url, api_key, model, engine: record(model, engine)
    )
    cli_main._register_commands()
    flags = [
        "--model",
        "m",
        "--cold-attention",
        "stream",
        "--num-sink-blocks",
        "0",
        "--kv-cache-memory",
        "1GiB",
    ]
    for args in (
        ["generate", "hi", *flags],
        ["chat", *flags],
        ["bench", "progressive", "--contexts", "32", "--out", str(tmp_path / "p"), *flags],
        ["bench", "stability", "--out", str(tmp_path / "s"), *flags],
    ):
        result = CliRunner().invoke(cli_main.app, args)
        assert result.exit_code == 2 and "recorded" in result.output, (args, result.output)
    assert len(seen) == 4
    for config in seen:
        assert (config.model, config.cold_attention, config.num_sink_blocks) == ("m", "stream", 0)
        assert config.kv_cache_memory_bytes == 2**30


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (
            ["--cold-attention", "bogus"],
            {},
            "--cold-attention must be auto, cpu, stream, split or sparse, got 'bogus'",
        ),
        (
            [],
            {"KVSPILL_COLD_ATTENTION": "bogus"},
            "--cold-attention must be auto, cpu, stream, split or sparse",
        ),
        (["--vram-budget", "lots"], {}, "--vram-budget: cannot read 'lots' as a size"),
        (["--cpu-kv-budget", "much"], {}, "--cpu-kv-budget: cannot read 'much' as a size"),
        (["--rope-scaling", "yarn:x"], {}, "--rope-scaling expects TYPE:FACTOR"),
        (
            ["--rope-scaling", "yarn"],
            {},
            "--rope-scaling 'yarn' has no factor: write TYPE:FACTOR such as yarn:4",
        ),
        (["--num-sink-blocks", "-1"], {}, "--num-sink-blocks and --hot-window-tokens must not be negative"),
        (["--block-size", "7"], {}, "--block-size must be 8, 16, 32, 64 or 128, got 7"),
    ],
)
def test_a_bad_value_is_one_line_and_exit_2(monkeypatch, args, env, message):
    monkeypatch.setattr(serve_cmd, "run_server", lambda *a: pytest.fail("served with a bad flag"))
    out = CliRunner().invoke(_serve_app(), ["serve", *args], env=env)
    assert out.exit_code == 2 and message in out.output, out.output
    assert out.output.startswith("error: ") and out.output.count("\n") == 1, out.output


def test_a_size_error_suggests_only_what_the_flag_takes():
    """A size flag needs a unit: its error's examples are all ones it takes (not a bare 1024)."""
    from kvspill.plan.units import parse_size

    with pytest.raises(InvalidParameterError) as bad:
        parse_size("16XB", "--vram-budget")
    examples = str(bad.value).split("e.g. ")[1].split(", ")
    assert examples and "1024" not in examples
    for example in examples:
        assert parse_size(example.split(" ")[0], "--vram-budget") > 0


@pytest.mark.parametrize(
    "path", [("plan", "llama-1b"), ("bench", "progressive", "--contexts", "32"), ("generate", "hi")]
)
def test_a_bad_value_is_refused_by_every_command(group, path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the bench suites write their folder only after checking
    result = CliRunner().invoke(cli_main.app, [*path, "--cold-attention", "bogus"])
    assert result.exit_code == 2, result.output
    assert "--cold-attention must be auto, cpu, stream, split or sparse" in result.output


def test_a_value_of_the_wrong_type_is_refused_by_click():
    out = CliRunner().invoke(_serve_app(), ["serve", "--num-sink-blocks", "many"])
    assert out.exit_code == 2 and "--num-sink-blocks" in out.output


# -- plan: its own names keep working, and engine flags it does not model are said so ------------


@pytest.fixture
def plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from kvspill.env import env_settings

    monkeypatch.setenv("KVSPILL_CALIBRATION", str(tmp_path / "calibration.json"))
    env_settings.cache_clear()
    cli_main._register_commands()

    def invoke(*args: str):
        return CliRunner().invoke(cli_main.app, ["plan", "llama-8b", "--vram-budget", "24GiB", *args])

    yield invoke
    env_settings.cache_clear()


def _yours(result) -> dict:
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.output)["plans"]["yours"]


def test_plan_takes_the_engine_names_of_its_own_flags(plan):
    assert _yours(plan("--cpu-kv-budget", "16GiB", "--json")) == _yours(
        plan("--ram-budget", "16GiB", "--json")
    )
    assert _yours(plan("--max-model-len", "8192", "--json")) == _yours(plan("--context", "8192", "--json"))
    for args in (
        ("--ram-budget", "1GiB", "--cpu-kv-budget", "1GiB"),
        ("--context", "8K", "--max-model-len", "8192"),
    ):
        result = plan(*args)
        assert result.exit_code == 2 and "give one of them" in result.output, result.output


def test_plan_models_the_engine_flags_that_shape_it(plan):
    before = _yours(plan("--context", "128K", "--json"))
    after = _yours(plan("--context", "128K", "--json", "--num-sink-blocks", "4", "--hot-window-tokens", "64"))
    assert before != after
    result = plan("--device", "cpu", "--attention", "cpu")
    assert "not planned (checked, then ignored): --device\n" in result.output
    assert "not planned" not in plan().output
    fp8 = plan("--kv-cache-dtype", "fp8")  # planned: the KV per token halves
    assert "not planned" not in fp8.output and "KiB fp8" in fp8.output


def test_plan_models_attention_cpu_as_the_engine_runs_it_on_a_gpu(plan):
    """--attention cpu: the gpu tier holds each sequence's sink and two newest blocks plus one
    prefill chunk (config.cpu_attention_gpu_blocks), the rest of the context is in the cpu tier."""
    from kvspill.config import EngineConfig, cpu_attention_gpu_blocks

    yours = _yours(plan("--attention", "cpu", "--context", "32K", "--json"))
    assert yours["gpu_kv_tokens"] == cpu_attention_gpu_blocks(EngineConfig()) * 16 == 5152
    assert yours["cpu_kv_tokens"] > 0
    assert (
        _yours(plan("--context", "32K", "--json"))["gpu_kv_tokens"] > 5152
    )  # without it: what VRAM holds (9,888 tokens)


def test_the_bench_report_repeats_the_engine_flags_given():
    from kvspill.cli.bench_suites_cmd import _command_line, progressive

    options = {"contexts": "32", "api_key": "secret", "enforce_eager": True, "cold_attention": "cpu"}
    assert _command_line("progressive", progressive, options) == (
        "kvspill bench progressive --contexts 32 --enforce-eager --cold-attention cpu"
    )

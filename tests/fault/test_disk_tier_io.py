"""An I/O error of the disk KV tier after start fails only what it touches, never the process
(issue 21): a failed read fails the step, the requests are retried one at a time and only the
one whose KV lives on the failing disk fails; a failed write stops spilling to the disk tier
(log line, metric) and the requests finish from the other tiers; a tier file truncated under
a running engine is an error, not a SIGBUS (checked in a child process). Tiny Llama on the CPU,
fp32, 8-token blocks and a few gpu blocks, so the KV spills."""

from __future__ import annotations

import errno
import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from kvspill.engine.core import LLMEngine
from kvspill.errors import StepError
from kvspill.sampling_params import SamplingParams
from kvspill.server.metrics import ServerMetrics

PARAMS = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True, detokenize=False)
# "long" spills most of its KV; "short" (8 + 16 tokens: within the sink and hot window) never does.
LONG, SHORT = list(range(3, 83)), list(range(100, 108))
BASE: dict[str, Any] = dict(device="cpu", dtype="float32", block_size=8, max_model_len=256)
TIERED: dict[str, Any] = dict(
    BASE, num_kv_blocks=6, max_num_batched_tokens=16, num_sink_blocks=1, hot_window_tokens=8
)


def _run(engine: LLMEngine, prompts: dict[str, list[int]]) -> tuple[dict[str, list[int]], list[list[str]]]:
    """Step to the end as a server does: a StepError fails the requests it names, the rest go on."""
    for req_id, ids in prompts.items():
        engine.add_request(ids, PARAMS, req_id=req_id)
    tokens: dict[str, list[int]] = {}
    failures: list[list[str]] = []
    for _ in range(400):
        if not engine.has_unfinished_requests():
            break
        try:
            outputs = engine.step()
        except StepError as e:
            failures.append(e.req_ids)
            for req_id in e.req_ids:
                engine.abort_request(req_id)
            continue
        tokens.update({o.req_id: o.token_ids for o in outputs if o.finished})
    assert not engine.has_unfinished_requests()
    return tokens, failures


def _failing_batches(engine: LLMEngine) -> list[set[str]]:
    """Records the requests of every step that raised."""
    failed: list[set[str]] = []
    launch = engine.runner.execute_async

    def recording(batch):  # type: ignore[no-untyped-def]
        try:
            return launch(batch)
        except Exception:
            failed.append(set(batch.num_scheduled_tokens))
            raise

    engine.runner.execute_async = recording  # type: ignore[method-assign]
    return failed


@pytest.fixture(scope="module")
def clean_tokens(tiny_llama_dir: Path) -> dict[str, list[int]]:
    engine = LLMEngine(model=str(tiny_llama_dir), **BASE, max_num_batched_tokens=256)
    tokens, failures = _run(engine, {"long": LONG, "short": SHORT})
    assert not failures
    return tokens


def test_a_read_error_fails_only_the_request_whose_blocks_are_on_disk(
    tiny_llama_dir: Path, tmp_path: Path, clean_tokens, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = LLMEngine(model=str(tiny_llama_dir), **TIERED, num_disk_kv_blocks=32, kv_disk_dir=str(tmp_path))
    failed_steps = _failing_batches(engine)

    def media_error(fd: int, buffers: list, offset: int) -> int:  # type: ignore[type-arg]
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "preadv", media_error)
    # "short" first: it decodes while "long" is prefilled in chunks and spills.
    tokens, failures = _run(engine, {"short": SHORT, "long": LONG})
    assert failures == [["long"]]  # failed alone, after its retry read the failing disk again
    assert failed_steps[0] == {"long", "short"}  # the first failure hit both; "short" was retried
    assert tokens == {"short": clean_tokens["short"]}
    stats = engine.kv_stats()
    assert stats.runner.disk_read_errors >= 2 and stats.runner.disk_write_errors == 0
    assert engine.scheduler.kv_tiers.disk.num_blocks < 32  # the unreadable blocks were retired


def test_a_write_error_stops_spilling_to_disk_and_requests_finish(
    tiny_llama_dir: Path, tmp_path: Path, clean_tokens, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    # gpu 6 + cpu 8 blocks hold either request alone (12 blocks), not both: together they spill
    # on to disk, where the first write fails.
    engine = LLMEngine(
        model=str(tiny_llama_dir),
        **TIERED,
        num_cpu_kv_blocks=8,
        num_disk_kv_blocks=32,
        kv_disk_dir=str(tmp_path),
    )
    twin = list(range(120, 200))

    def no_write(fd: int, buffers: list, offset: int) -> int:  # type: ignore[type-arg]
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "pwritev", no_write)
    with caplog.at_level(logging.WARNING):
        tokens, failures = _run(engine, {"long": LONG, "twin": twin})
    assert not failures
    assert tokens["long"] == clean_tokens["long"]
    alone = LLMEngine(model=str(tiny_llama_dir), **BASE, max_num_batched_tokens=256)
    assert tokens["twin"] == _run(alone, {"twin": twin})[0]["twin"]
    assert engine.scheduler.kv_tiers.disk.num_blocks == 0  # no more spills to disk
    assert engine.kv_capacity_tokens() == (6 + 8) * 8  # admission counts the tiers left
    assert sum("disk KV tier disabled" in r.getMessage() for r in caplog.records) == 1
    assert any(str(tmp_path) in r.getMessage() for r in caplog.records)  # the log names the file
    stats = engine.kv_stats()
    assert stats.runner.disk_write_errors == 1
    metrics = ServerMetrics("m")
    metrics.refresh(stats)
    assert 'kvspill:disk_tier_errors_total{model_name="m",op="write"} 1.0' in metrics.render().decode()


_TRUNCATE = """
import json, os, sys
from kvspill.engine.core import LLMEngine
from kvspill.errors import StepError
from kvspill.sampling_params import SamplingParams

engine = LLMEngine(model=sys.argv[1], kv_disk_dir=sys.argv[2], num_disk_kv_blocks=32, **json.loads(sys.argv[3]))
engine.add_request(list(range(3, 83)), SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True,
                   detokenize=False), req_id="long")
truncated, failed, final = False, [], None
for _ in range(400):
    if not engine.has_unfinished_requests():
        break
    if not truncated and engine.scheduler.kv_tiers.disk.num_used_blocks >= 2:
        os.ftruncate(engine.bundle.storage.disk.fd, 0)  # someone truncates the tier file
        truncated = True
    try:
        final = next((o for o in engine.step() if o.finished), final)
    except StepError as e:
        failed += e.req_ids
        for req_id in e.req_ids:
            engine.abort_request(req_id)
try:  # a block lost to the truncation: the read comes back short
    engine.bundle.storage.read_blocks(2, [0])
    short_read = "no error"
except OSError as e:
    short_read = str(e)
runner = engine.kv_stats().runner
print(json.dumps(dict(truncated=truncated, failed=failed, short_read=short_read,
                      error=final and final.error, num_tokens=final and len(final.token_ids),
                      errors=runner.disk_read_errors + runner.disk_write_errors,
                      disk_blocks=engine.scheduler.kv_tiers.disk.num_blocks)))
"""


def test_a_truncated_tier_file_is_an_error_not_a_signal(tiny_llama_dir: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(_TRUNCATE),
            str(tiny_llama_dir),
            str(tmp_path),
            json.dumps(TIERED),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, f"exit {done.returncode} (a negative one is a signal): {done.stderr[-3000:]}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["truncated"] and result["errors"] >= 1
    assert result["disk_blocks"] == 0  # a truncated file takes no more spills
    # Retried from scratch without the disk tier, "long" no longer fits the gpu tier: it fails, with
    # the scheduler's message saying so.
    assert result["failed"] == [] and result["num_tokens"] == 0
    assert "needs 10 KV blocks" in result["error"]
    assert "ends before the block (truncated?)" in result["short_read"]
    assert "disk KV tier disabled" in done.stderr and "truncated to 0 of" in done.stderr

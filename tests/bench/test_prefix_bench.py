"""The prefix-cache benchmark at tiny size on the CPU: every phase runs, and every question finds the
whole prefix (in the cpu tier, on disk, or in the persist dir after the restart)."""

from __future__ import annotations

import json

from kvspill.bench import prefix_bench

BS, CTX, QUESTION = 8, 144, 16  # a prefix of 128 tokens: 16 blocks


def test_every_phase_finds_the_whole_prefix(tiny_llama_dir, tmp_path):
    out = tmp_path / "prefix.jsonl"
    argv = ["--model", str(tiny_llama_dir), "--device", "cpu", "--dtype", "float32", "--block-size", str(BS),
            "--ctx", str(CTX), "--question-tokens", str(QUESTION), "--questions", "2", "--concurrency", "2",
            "--new-tokens", "1", "--max-num-batched-tokens", "32", "--hot-window-tokens", "16", "--num-kv-blocks", "12",
            "--num-cpu-kv-blocks", "80", "--num-disk-kv-blocks", "80", "--disk-phase-cpu-blocks", "4",
            "--kv-disk-dir", str(tmp_path / "disk"), "--kv-persist-dir", str(tmp_path / "persist"), "--out", str(out)]  # fmt: skip
    assert prefix_bench.main(argv) == 0
    records = {r["phase"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert set(records) == {"cpu", "disk", "persist"}
    whole = (CTX - QUESTION) // BS * BS
    for phase, record in records.items():
        assert record["cached_tokens"] == [whole] * 2, phase
        assert len(record["ttft_s"]) == 2 and record["cold_ttft_s"] > 0
    for phase, tier in (("cpu", "cpu"), ("disk", "disk"), ("persist", "cpu")):
        hits = records[phase]["hit_tokens_per_tier"]
        assert sum(hits.values()) == 2 * whole and hits[tier] > 0, (phase, hits)
    assert records["persist"]["persist_loaded_blocks"] == whole // BS
    assert records["persist"]["persist_bytes_read"] > 0 and records["persist"]["read_bytes_per_hit"] > 0

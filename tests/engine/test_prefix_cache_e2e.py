"""Prefix cache across tiers and restarts, end to end on the tiny Llama (fp32, CPU): a request whose
prefix is found in the cpu tier, the disk tier or the persist dir after a restart gives exactly the
greedy tokens of a cold run, and `num_cached_tokens` is the hit; bad persisted files are skipped."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
import torch

from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams
from kvspill.scheduler.request import Request

BS = 8
PREFIX_LEN = 120  # 15 full blocks
PARAMS = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)


def _llm(model_dir, tmp_path: Path, **opts) -> LLM:
    base = dict(
        device="cpu", dtype="float32", block_size=BS, max_model_len=512, max_num_batched_tokens=32,
        num_kv_blocks=6, num_sink_blocks=1, hot_window_tokens=8, kv_disk_dir=str(tmp_path / "disk"),
    )  # fmt: skip
    base.update(opts)
    return LLM(str(model_dir), **base)


@pytest.fixture(scope="module")
def prompts():
    g = torch.Generator().manual_seed(3)
    prefix = torch.randint(3, 256, (PREFIX_LEN,), generator=g).tolist()
    return [prefix + torch.randint(3, 256, (11,), generator=g).tolist() for _ in range(2)]


@pytest.fixture(scope="module")
def cold_run(tiny_llama_dir, tmp_path_factory, prompts):
    """The second prompt's greedy tokens with nothing cached (prefix caching off)."""
    llm = _llm(
        tiny_llama_dir, tmp_path_factory.mktemp("cold"), enable_prefix_caching=False, num_cpu_kv_blocks=40
    )
    return llm.generate([prompts[1]], PARAMS)[0].token_ids


def _second(llm: LLM, prompts):
    llm.generate([prompts[0]], PARAMS)
    return llm.generate([prompts[1]], PARAMS)[0]


@pytest.mark.parametrize(
    ("tiers", "tier"),
    [(dict(num_cpu_kv_blocks=40), "cpu"), (dict(num_cpu_kv_blocks=2, num_disk_kv_blocks=40), "disk")],
    ids=["cpu", "disk"],
)
def test_a_prefix_hit_in_a_cold_tier_gives_the_cold_runs_tokens(
    tiny_llama_dir, tmp_path, prompts, cold_run, tiers, tier
):
    llm = _llm(tiny_llama_dir, tmp_path, **tiers)
    out = _second(llm, prompts)
    assert out.token_ids == cold_run
    assert out.num_cached_tokens == PREFIX_LEN
    hits = llm.engine.kv_stats().scheduler.kv_tiers.prefix_hit_tokens
    assert hits[tier] >= PREFIX_LEN // 2 and sum(hits.values()) == PREFIX_LEN


def test_a_prefix_evicted_from_the_gpu_is_demoted_and_hit_in_the_cpu_tier(
    tiny_llama_dir, tmp_path, prompts, cold_run
):
    # 20 gpu blocks: the first request never spills, so its prefix is cached on the gpu only;
    # an unrelated request then reuses those blocks, each copied to the cpu tier first.
    llm = _llm(tiny_llama_dir, tmp_path, num_kv_blocks=20, num_cpu_kv_blocks=40)
    llm.generate([prompts[0]], PARAMS)
    tiers = llm.engine.kv_stats().scheduler.kv_tiers
    assert tiers.prefix_cached_blocks["cpu"] == 0 and tiers.kv_block_moves.get("gpu->cpu", 0) == 0
    other = torch.randint(3, 256, (150,), generator=torch.Generator().manual_seed(9)).tolist()
    llm.generate([other], PARAMS)
    out = llm.generate([prompts[1]], PARAMS)[0]
    assert out.token_ids == cold_run
    assert out.num_cached_tokens == PREFIX_LEN
    tiers = llm.engine.kv_stats().scheduler.kv_tiers
    assert (
        tiers.prefix_hit_tokens["cpu"] >= PREFIX_LEN // 2
        and sum(tiers.prefix_hit_tokens.values()) == PREFIX_LEN
    )
    assert tiers.num_demoted_prefix_blocks >= tiers.prefix_hit_tokens["cpu"] // BS


def test_a_wave_on_a_prefix_that_fills_the_gpu_tier_gives_the_cold_runs_tokens(
    tiny_llama_dir, tmp_path, prompts, cold_run
):
    # 17 gpu blocks hold one request (15 prefix blocks + 2): the second request's gpu hits leave
    # for both requests as shared cold blocks (one copy each) so that both run in the same steps.
    llm = _llm(tiny_llama_dir, tmp_path, num_kv_blocks=17, num_cpu_kv_blocks=40)
    first = llm.generate([prompts[0]], PARAMS)[0]  # nothing cached yet: the reference for it
    outs = llm.generate([prompts[0], prompts[1]], PARAMS)
    assert [o.token_ids for o in outs] == [first.token_ids, cold_run]
    assert [o.num_cached_tokens for o in outs] == [(len(prompts[0]) - 1) // BS * BS, PREFIX_LEN]
    tiers = llm.engine.kv_stats().scheduler.kv_tiers
    assert tiers.prefix_hit_tokens["cpu"] > 0 and tiers.kv_block_moves.get("gpu->cpu", 0) > 0


@pytest.mark.parametrize(
    "tiers",
    [dict(num_cpu_kv_blocks=40), dict(num_cpu_kv_blocks=2, num_disk_kv_blocks=40), dict(num_kv_blocks=40)],
    ids=["cpu", "disk", "gpu-only"],
)
def test_a_prefix_persisted_before_a_restart_gives_the_cold_runs_tokens(
    tiny_llama_dir, tmp_path, prompts, cold_run, tiers
):
    persist = tmp_path / "persist"
    first = _llm(tiny_llama_dir, tmp_path, **tiers, kv_persist_dir=str(persist))
    first.generate([prompts[0]], PARAMS)
    first.engine.close()
    assert len(list(persist.glob("*.kvb"))) >= PREFIX_LEN // BS
    second = _llm(tiny_llama_dir, tmp_path, **tiers, kv_persist_dir=str(persist))
    out = second.generate([prompts[1]], PARAMS)[0]
    assert out.token_ids == cold_run
    assert out.num_cached_tokens == PREFIX_LEN
    store = second.engine.persister.store
    assert store.num_loaded == PREFIX_LEN // BS and store.bytes_loaded > 0
    hits = second.engine.kv_stats().scheduler.kv_tiers.prefix_hit_tokens
    if "num_disk_kv_blocks" in tiers:  # written from and loaded into the disk tier's file
        assert hits["disk"] >= PREFIX_LEN // 2
    if "num_kv_blocks" in tiers:  # no cold tier: read into gpu blocks, hit there
        assert hits["gpu"] == PREFIX_LEN
    second.engine.close()


def test_persisted_blocks_are_read_while_other_requests_run(tiny_llama_dir, tmp_path, prompts, cold_run):
    """Reads into the cpu tier run on threads: a request waiting for its persisted prefix is
    passed over (keeping its place), a later request runs meanwhile, and once the reads end the
    first is admitted with the whole prefix as a hit and gives the cold run's tokens."""
    persist, _ = _persist_first(tiny_llama_dir, tmp_path, prompts)
    llm = _llm(tiny_llama_dir, tmp_path, num_cpu_kv_blocks=40, kv_persist_dir=str(persist))
    engine = llm.engine
    store = engine.persister.store
    gate = threading.Event()
    load_into = store.load_into

    def slow_load(block_hash, dst):  # type: ignore[no-untyped-def]
        gate.wait(30)
        return load_into(block_hash, dst)

    store.load_into = slow_load
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True, detokenize=False)
    engine.add_request(prompts[1], params, req_id="persisted")
    engine.add_request(list(range(3, 40)), params, req_id="other")
    engine.add_request(prompts[1], params, req_id="twin")  # waits for the same reads
    done: dict[str, list[int]] = {}
    for _ in range(20):  # the other request prefills and decodes; the first is held back
        done.update({o.req_id: o.token_ids for o in engine.step() if o.finished})
        if "other" in done:
            break
    assert "other" in done and "persisted" not in done
    assert engine.scheduler.get_request("persisted").num_computed_tokens == 0
    gate.set()
    cached = 0
    while engine.has_unfinished_requests():
        for o in engine.step():
            cached = max(cached, o.num_cached_tokens if o.req_id == "persisted" else 0)
            if o.finished:
                done[o.req_id] = o.token_ids
    assert done["persisted"] == cold_run == done["twin"] and cached == PREFIX_LEN
    assert store.num_loaded == PREFIX_LEN // BS  # each block read once
    engine.close()


def test_int8_kv_blocks_persisted_and_read_back_into_the_disk_tier(tiny_llama_dir, tmp_path, prompts):
    """int8 KV rows carry their scale (row_dim = head_dim + 4): the CPU path's staging of disk
    blocks (the cold run) and a block read back from the persist dir into the disk tier's file
    both have the stored row width. Both used head_dim before and failed the step."""
    tiers = dict(num_cpu_kv_blocks=2, num_disk_kv_blocks=40, kv_cache_dtype="int8")
    cold = _llm(tiny_llama_dir, tmp_path / "cold", **tiers, enable_prefix_caching=False)
    want = cold.generate([prompts[1]], PARAMS)[0].token_ids
    persist = tmp_path / "persist"
    first = _llm(tiny_llama_dir, tmp_path, **tiers, kv_persist_dir=str(persist))
    first.generate([prompts[0]], PARAMS)
    first.engine.close()
    second = _llm(tiny_llama_dir, tmp_path, **tiers, kv_persist_dir=str(persist))
    out = second.generate([prompts[1]], PARAMS)[0]
    assert out.token_ids == want and out.num_cached_tokens == PREFIX_LEN
    assert second.engine.kv_stats().scheduler.kv_tiers.prefix_hit_tokens["disk"] >= PREFIX_LEN // 2
    second.engine.close()


def _persist_first(tiny_llama_dir, tmp_path, prompts) -> tuple[Path, int]:
    """Run the first prompt with a persist dir; returns it and the engine's prefix hash seed."""
    persist = tmp_path / "persist"
    first = _llm(tiny_llama_dir, tmp_path, num_cpu_kv_blocks=40, kv_persist_dir=str(persist))
    first.generate([prompts[0]], PARAMS)
    first.engine.close()
    return persist, first.engine.scheduler.config.prefix_hash_seed


def _block_file(llm_prompt_hashes: list[int], persist: Path, index: int) -> Path:
    return persist / f"{llm_prompt_hashes[index]:016x}.kvb"


def test_corrupt_and_torn_files_are_skipped_with_a_warning(
    tiny_llama_dir, tmp_path, prompts, cold_run, caplog
):
    persist, seed = _persist_first(tiny_llama_dir, tmp_path, prompts)
    hashes = Request("probe", prompts[1], PARAMS, frozenset(), 0.0, 512, BS, hash_seed=seed).block_hashes
    corrupt, torn = _block_file(hashes, persist, 6), _block_file(hashes, persist, 12)
    data = bytearray(corrupt.read_bytes())
    data[-5] ^= 0xFF  # one payload byte: only the checksum tells
    corrupt.write_bytes(bytes(data))
    torn.write_bytes(torn.read_bytes()[:-100])
    with caplog.at_level(logging.WARNING, logger="kvspill.storage.persist"):
        third = _llm(tiny_llama_dir, tmp_path, num_cpu_kv_blocks=40, kv_persist_dir=str(persist))
        assert any("torn" in r.message for r in caplog.records)
        out = third.generate([prompts[1]], PARAMS)[0]
    assert any("checksum mismatch" in r.message for r in caplog.records)
    assert out.token_ids == cold_run
    assert out.num_cached_tokens == 6 * BS  # blocks 0..5 loaded; block 6 refused: the rest computed
    third.engine.close()


def test_files_of_another_kv_configuration_are_skipped(tiny_llama_dir, tmp_path, prompts, caplog):
    persist, _ = _persist_first(tiny_llama_dir, tmp_path, prompts)
    with caplog.at_level(logging.WARNING, logger="kvspill.storage.persist"):
        other = _llm(
            tiny_llama_dir, tmp_path, num_cpu_kv_blocks=40, kv_persist_dir=str(persist), kv_cache_dtype="fp8"
        )
    assert any("fingerprint differs" in r.message for r in caplog.records)
    assert other.engine.persister.store.num_blocks == 0
    out = other.generate([prompts[1]], PARAMS)[0]
    assert out.num_cached_tokens == 0
    other.engine.close()


def test_int8_files_of_the_row_layout_are_skipped(tiny_llama_dir, tmp_path, prompts, monkeypatch, caplog):
    """int8 blocks of the earlier row layout (values and scale interleaved per row) have the
    shape and dtype of today's planes: only the fingerprint's layout key keeps them from being
    read as planes. An engine that hashes its identity without that key writes such files."""
    from kvspill.engine import setup as engine_setup
    from kvspill.storage.persist import kv_fingerprint

    def without_layout_key(identity: dict) -> int:
        return kv_fingerprint({k: v for k, v in identity.items() if k != "int8_block_layout"})

    persist = tmp_path / "persist"
    with monkeypatch.context() as patch:
        patch.setattr(engine_setup, "kv_fingerprint", without_layout_key)
        old = _llm(
            tiny_llama_dir, tmp_path, num_cpu_kv_blocks=40, kv_persist_dir=str(persist), kv_cache_dtype="int8"
        )
        old.generate([prompts[0]], PARAMS)
        old.engine.close()
    assert list(persist.glob("*.kvb"))
    with caplog.at_level(logging.WARNING, logger="kvspill.storage.persist"):
        new = _llm(
            tiny_llama_dir, tmp_path, num_cpu_kv_blocks=40, kv_persist_dir=str(persist), kv_cache_dtype="int8"
        )
    assert any("fingerprint differs" in r.message for r in caplog.records)
    assert new.engine.persister.store.num_blocks == 0
    assert new.generate([prompts[1]], PARAMS)[0].num_cached_tokens == 0
    new.engine.close()

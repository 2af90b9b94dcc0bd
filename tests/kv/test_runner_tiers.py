"""A ModelRunner executing batches with BlockMoves gives the logits of the same batches without.

Hand-written steps on a tiny random Llama (fp32, block_size 4): chunked prefill and decodes of
two requests, blocks spilled gpu->cpu (one grouped run), gpu->disk, chained gpu->cpu->disk, and
one brought back cpu->gpu into an id freed earlier in the same plan. The reference runner gets
the same batches without the moves (every block stays where it was allocated).
"""

from __future__ import annotations

import pytest
import torch

from kvspill.attention.cold.config import ColdAttentionConfig
from kvspill.model.loader import load_model
from kvspill.model.resolve import resolve_model
from kvspill.runner.model_runner import ModelRunner
from kvspill.sampling_params import SamplingParams
from kvspill.storage.storage import KVLayout, KVStorage, TieredKVStorage
from kvspill.types import (
    TIER_CPU,
    TIER_DISK,
    TIER_GPU,
    BlockMove,
    CachedRequestData,
    NewRequestData,
    ScheduledBatch,
    TransferPlan,
)

BS = 4
GREEDY = SamplingParams(temperature=0.0, max_tokens=32, ignore_eos=True)


def _batches(prompt_a: list[int], prompt_b: list[int]) -> list[ScheduledBatch]:
    """A: 40-token prompt in chunks of 24 and 16, then decodes. B: 13-token prompt, then decodes."""
    new = [
        NewRequestData("a", prompt_a, [], GREEDY, list(range(10)), 0),
        NewRequestData("b", prompt_b, [], GREEDY, [10, 11, 12, 13], 0),
    ]
    step1 = ScheduledBatch(new, [], {"a": 24, "b": 13}, 37, set())
    spill = TransferPlan(
        [
            *(BlockMove("a", i, TIER_GPU, i, TIER_CPU, i - 1) for i in range(1, 5)),  # one run of 4
            BlockMove("b", 1, TIER_GPU, 11, TIER_DISK, 0),
        ]
    )
    step2 = ScheduledBatch(
        [],
        [CachedRequestData("a", [], 24), CachedRequestData("b", [], 13)],
        {"a": 16, "b": 1},
        17,
        set(),
        transfers=spill,
    )
    shuffle = TransferPlan(
        [
            BlockMove("a", 5, TIER_GPU, 5, TIER_CPU, 4),
            BlockMove("a", 5, TIER_CPU, 4, TIER_DISK, 1),  # chained on to disk
            BlockMove("b", 2, TIER_GPU, 12, TIER_CPU, 4),  # into the cpu id just freed
            BlockMove("a", 1, TIER_CPU, 0, TIER_GPU, 5),  # back to the gpu id freed above
        ]
    )
    step3 = ScheduledBatch(
        [],
        [CachedRequestData("a", [14], 40), CachedRequestData("b", [], 14)],
        {"a": 1, "b": 1},
        2,
        set(),
        transfers=shuffle,
    )
    steps = [step1, step2, step3]
    for k in range(3):  # plain decodes; b needs block 4 at position 16
        b_new = [15] if k == 1 else []
        steps.append(
            ScheduledBatch(
                [],
                [CachedRequestData("a", [], 41 + k), CachedRequestData("b", b_new, 15 + k)],
                {"a": 1, "b": 1},
                2,
                set(),
            )
        )
    return steps


def _strip_moves(batch: ScheduledBatch) -> ScheduledBatch:
    return ScheduledBatch(
        batch.new_reqs,
        batch.cached_reqs,
        batch.num_scheduled_tokens,
        batch.total_num_scheduled_tokens,
        batch.finished_req_ids,
    )


def _run(runner: ModelRunner, batches: list[ScheduledBatch]) -> tuple[list[torch.Tensor], list[dict]]:
    """Execute the batches; the logits of every step (eager or graph-replayed) and the tokens."""
    recorded: list[torch.Tensor] = []
    forward = runner._forward

    def recording(inputs, feed):
        logits, greedy_ids = forward(inputs, feed)
        recorded.append(logits.detach().float().cpu())
        return logits, greedy_ids

    runner._forward = recording  # type: ignore[method-assign]
    outputs = [runner.execute(b).sampled_token_ids for b in batches]
    return recorded, outputs


@pytest.mark.parametrize("path", ["cpu", "stream", "split", "sparse"])
def test_runner_with_moves_gives_the_same_logits(tiny_llama_dir, tmp_path, path):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loaded = load_model(resolve_model(str(tiny_llama_dir)), device, torch.float32)
    layout = KVLayout(loaded.num_layers, BS, loaded.num_kv_heads, loaded.head_dim, torch.float32)
    g = torch.Generator().manual_seed(0)
    prompt_a = torch.randint(5, 256, (40,), generator=g).tolist()
    prompt_b = torch.randint(5, 256, (13,), generator=g).tolist()
    batches = _batches(prompt_a, prompt_b)

    plain = ModelRunner(
        loaded.model, KVStorage(layout, 24, device), head_dim=loaded.head_dim, eos_token_ids=frozenset()
    )
    want_logits, want_tokens = _run(plain, [_strip_moves(b) for b in batches])

    storage = TieredKVStorage(layout, 24, device, num_cpu_blocks=8, num_disk_blocks=4, disk_dir=tmp_path)
    storage.kv_cache.fill_(float("nan"))  # never-written gpu blocks must never be read
    config = ColdAttentionConfig(path=path, cpu_fraction=0.5, stream_chunk_blocks=2)
    tiered = ModelRunner(
        loaded.model, storage, head_dim=loaded.head_dim, eos_token_ids=frozenset(), cold_config=config
    )
    got_logits, got_tokens = _run(tiered, batches)

    assert got_tokens == want_tokens
    assert len(got_logits) == len(want_logits) == len(batches)
    for got, want in zip(got_logits, want_logits, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    a = tiered.states["a"]
    assert a.block_tiers[:6] == [TIER_GPU, TIER_GPU, TIER_CPU, TIER_CPU, TIER_CPU, TIER_DISK]
    assert a.block_ids[:6] == [0, 5, 1, 2, 3, 1] and a.num_cold_blocks == 4
    assert tiered.states["b"].block_tiers[:3] == [TIER_GPU, TIER_DISK, TIER_CPU]
    stats = tiered.kv_stats()
    assert stats.transfer is not None and stats.cold is not None
    block = layout.block_bytes
    moved = stats.bytes_moved
    assert moved["gpu_to_cpu"] == 6 * block and moved["cpu_to_gpu"] == block
    assert moved["gpu_to_disk"] == block and moved["cpu_to_disk"] == block
    assert stats.transfer.num_moves == 9 and stats.transfer.num_copies == 6
    assert stats.cold.num_steps == 5
    if path == "sparse":  # a budget above every cold length: all blocks, summaries made at spill time
        assert tiered.cold is not None and tiered.cold.summaries is not None
        assert stats.cold.sparse_selected_blocks == stats.cold.sparse_cold_blocks > 0
        assert tiered.cold.summaries.num_late == 0 and tiered.cold.summaries.num_spilled == 7


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_attention_cpu_mode_keeps_kv_on_the_host(tiny_llama_dir):
    """--attention cpu: weights on the GPU, the KV pool and all attention on the host."""
    device = torch.device("cuda")
    loaded = load_model(resolve_model(str(tiny_llama_dir)), device, torch.float32)
    layout = KVLayout(loaded.num_layers, BS, loaded.num_kv_heads, loaded.head_dim, torch.float32)
    g = torch.Generator().manual_seed(1)
    batches = [
        _strip_moves(b)
        for b in _batches(
            torch.randint(5, 256, (40,), generator=g).tolist(),
            torch.randint(5, 256, (13,), generator=g).tolist(),
        )
    ]
    on_gpu = ModelRunner(
        loaded.model, KVStorage(layout, 24, device), head_dim=loaded.head_dim, eos_token_ids=frozenset()
    )
    want_logits, want_tokens = _run(on_gpu, batches)
    host_pool = KVStorage(layout, 24, torch.device("cpu"))
    on_host = ModelRunner(
        loaded.model, host_pool, head_dim=loaded.head_dim, eos_token_ids=frozenset(), device=device
    )
    got_logits, got_tokens = _run(on_host, batches)
    assert got_tokens == want_tokens
    for got, want in zip(got_logits, want_logits, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert host_pool.kv_cache.abs().sum() > 0  # the host pool holds the KV


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("with_moves", [False, True])
def test_cuda_graphs_replay_only_steps_without_cold_blocks(tiny_llama_dir, tmp_path, with_moves):
    from kvspill.runner.cuda_graphs import DecodeGraphs

    device = torch.device("cuda")
    loaded = load_model(resolve_model(str(tiny_llama_dir)), device, torch.float32)
    layout = KVLayout(loaded.num_layers, BS, loaded.num_kv_heads, loaded.head_dim, torch.float32)
    g = torch.Generator().manual_seed(2)
    batches = _batches(
        torch.randint(5, 256, (40,), generator=g).tolist(), torch.randint(5, 256, (13,), generator=g).tolist()
    )
    eager = ModelRunner(
        loaded.model, KVStorage(layout, 24, device), head_dim=loaded.head_dim, eos_token_ids=frozenset()
    )
    want_logits, want_tokens = _run(eager, [_strip_moves(b) for b in batches])
    storage = TieredKVStorage(layout, 24, device, num_cpu_blocks=8, num_disk_blocks=4, disk_dir=tmp_path)
    graphs = DecodeGraphs(
        loaded.model, storage, scale=loaded.head_dim**-0.5, max_num_seqs=4, max_blocks_per_seq=16
    )
    graphs.capture()
    replays = []
    original_run = graphs.run
    graphs.run = lambda inputs, feed=None: replays.append(len(inputs.req_ids)) or original_run(inputs, feed)  # type: ignore[method-assign]
    runner = ModelRunner(
        loaded.model, storage, head_dim=loaded.head_dim, eos_token_ids=frozenset(), graphs=graphs
    )
    got_logits, got_tokens = _run(runner, batches if with_moves else [_strip_moves(b) for b in batches])
    assert got_tokens == want_tokens
    for got, want in zip(got_logits, want_logits, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert len(replays) == (0 if with_moves else 4)  # the decode-only steps; never one with cold blocks

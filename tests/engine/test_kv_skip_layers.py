"""--kv-cache-dtype-skip-layers end to end (tiny Llama of 3 layers, fp32, CPU): the listed layers
keep the model dtype and the others the format, exactly as stored by a pool of each; a mixed pool
goes through the cold tiers, every cold path (sparse with a budget that picks every block, its
summaries built per layer), the disk tier and the persist dir as a uniform one does; bad lists
are refused with what to change."""

from __future__ import annotations

import pytest
import torch

from kvspill.config import EngineConfig, parse_layer_list
from kvspill.errors import InvalidParameterError
from kvspill.kernels.kv_quant import quantize_kv
from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams

BASE = dict(dtype="float32", block_size=8, max_model_len=512, max_num_batched_tokens=32)
# the same cases on a GPU (the Triton store and attention kernels over a byte pool's typed views,
# the zero-copy gather, stream graphs): run there with `pytest tests/engine/test_kv_skip_layers.py`
DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")),
]


def _prompt(n: int, seed: int) -> list[int]:
    return torch.randint(3, 256, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.parametrize("device", DEVICES)
def test_skipped_layers_store_the_model_dtype_and_the_others_the_format(tiny_llama_dir, device):
    """Layer 0 kept, layers 1-2 fp8: layer 0's KV is bit for bit the fp32 run's, and layer 1's (whose
    input only layer 0 shaped) is the fp32 run's KV cast to fp8; the pool is 4 + 1 + 1 bytes a value."""
    prompt = _prompt(77, 1)
    params = SamplingParams(temperature=0, max_tokens=1)  # the prompt's KV only
    pools = {}
    for name, opts in (("fp32", {}), ("mixed", dict(kv_cache_dtype="fp8", kv_cache_dtype_skip_layers=[0]))):
        llm = LLM(str(tiny_llama_dir), **BASE, device=device, num_kv_blocks=40, **opts)
        llm.generate([prompt], params)
        pools[name] = llm.engine.bundle.storage
        llm.engine.close()
    fp32, mixed = pools["fp32"], pools["mixed"]
    assert [mixed.layer(i).dtype for i in range(3)] == [
        torch.float32,
        torch.float8_e4m3fn,
        torch.float8_e4m3fn,
    ]
    assert mixed.layout.bytes_per_token * 4 == fp32.layout.bytes_per_token * (4 + 1 + 1) // 3
    assert torch.equal(mixed.layer(0), fp32.layer(0)) and fp32.layer(0).abs().sum() > 0
    want = quantize_kv(fp32.layer(1), torch.float8_e4m3fn)
    if device == "cpu":
        assert torch.equal(mixed.layer(1).view(torch.uint8), want.view(torch.uint8))
    else:  # the Triton store rounds at fp8's mantissa width, then casts: one subnormal step apart at most
        assert (mixed.layer(1).float() - want.float()).abs().max().item() <= 2.0**-9


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kv_cache_dtype", ["fp8", "int8"])
@pytest.mark.parametrize("cold_attention", ["cpu", "stream", "split", "sparse"])
def test_a_mixed_pool_over_cold_tiers_and_a_restart_gives_the_one_tier_tokens(
    tiny_llama_dir, tmp_path, kv_cache_dtype, cold_attention, device
):
    prompt = _prompt(131, 3)
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    mixed = dict(kv_cache_dtype=kv_cache_dtype, kv_cache_dtype_skip_layers=[1])
    whole = LLM(
        str(tiny_llama_dir), **BASE, device=device, **mixed, num_kv_blocks=80, enable_prefix_caching=False
    )
    want = whole.generate([prompt], params)[0].token_ids
    whole.engine.close()
    tiered = dict(
        num_kv_blocks=6, num_sink_blocks=1, hot_window_tokens=8, num_cpu_kv_blocks=4, num_disk_kv_blocks=40,
        kv_disk_dir=str(tmp_path / "disk"), kv_persist_dir=str(tmp_path / "persist"), cold_attention=cold_attention,
        sparse_budget_tokens=4096,  # sparse: a budget past the cold length picks every block (exact)
    )  # fmt: skip
    first = LLM(str(tiny_llama_dir), **BASE, device=device, **mixed, **tiered)
    assert first.generate([prompt], params)[0].token_ids == want
    stats = first.engine.kv_stats()
    assert stats.max_cold_fraction >= 0.6 and stats.total_bytes_moved > 0
    first.engine.close()
    second = LLM(
        str(tiny_llama_dir), **BASE, device=device, **mixed, **tiered
    )  # the prompt's blocks from the persist dir
    out = second.generate([prompt], params)[0]
    second.engine.close()
    assert out.token_ids == want
    assert out.num_cached_tokens == (len(prompt) - 1) // 8 * 8


def test_a_skip_list_naming_a_layer_the_model_lacks_is_refused(tiny_llama_dir):
    with pytest.raises(InvalidParameterError, match=r"layer\(s\) \[3\], but the model has 3 layers \(0-2\)"):
        LLM(
            str(tiny_llama_dir),
            **BASE,
            device="cpu",
            kv_cache_dtype="int8",
            kv_cache_dtype_skip_layers=[0, 3],
        )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(kv_cache_dtype_skip_layers="0,2"), "with auto every layer holds the model dtype"),
        (dict(kv_cache_dtype="fp8", kv_cache_dtype_skip_layers="1,x"), "layer indices such as 0,10,23"),
        (dict(kv_cache_dtype="fp8", kv_cache_dtype_skip_layers=[-1]), "start at 0"),
    ],
)
def test_bad_skip_lists_say_what_to_change(options, message):
    with pytest.raises(InvalidParameterError, match=message):
        EngineConfig(model="m", **options)


def test_a_skip_list_is_sorted_once_each():
    assert parse_layer_list(" 10, 0,10 ,") == (0, 10)
    assert EngineConfig(
        model="m", kv_cache_dtype="int8", kv_cache_dtype_skip_layers=[3, 1]
    ).kv_cache_dtype_skip_layers == (1, 3)


def test_blocks_persisted_under_another_skip_list_are_not_loaded(tiny_llama_dir, tmp_path):
    """The persist dir's fingerprint names the list: layer 1's bytes of a [1] pool are not a [2] pool's."""
    prompt = _prompt(90, 5)
    params = SamplingParams(temperature=0, max_tokens=2)
    opts = dict(BASE, device="cpu", kv_cache_dtype="fp8", kv_persist_dir=str(tmp_path / "persist"))
    cached = {}
    for skip in ([1], [2], [1]):
        llm = LLM(str(tiny_llama_dir), **opts, kv_cache_dtype_skip_layers=skip)
        cached[len(cached)] = llm.generate([prompt], params)[0].num_cached_tokens
        llm.engine.close()
    assert cached == {0: 0, 1: 0, 2: (len(prompt) - 1) // 8 * 8}

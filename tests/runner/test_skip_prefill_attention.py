"""The benchmarks' fill-only prefill (`ModelRunner.skip_prefill_attention`, `bench/fill_only.py`) on
the tiny random Llama (CPU, tiered KV): prefill chunks store the K/V a normal prefill stores (layer
0, whose input is the embedding, bit for bit) without running prefill attention, exact or cold;
decode rows still attend every cold block; a bench row measured so carries no TTFT."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from tiered_llm import tiered_llm

from kvspill.bench import fill_only
from kvspill.runner import attention
from kvspill.sampling_params import SamplingParams

PROMPT = torch.randint(3, 256, (120,), generator=torch.Generator().manual_seed(4)).tolist()
GREEDY = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)


def _run(model_dir, monkeypatch, skip: bool) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], int, object]:
    stored: list[tuple[torch.Tensor, torch.Tensor]] = []  # layer 0's K/V of each prefill chunk
    prefill_calls = []
    real_store = attention.store_kv_host

    def store(k, v, kv_layer, slot_mapping):
        if k.shape[0] > 1:
            stored.append((k.clone(), v.clone()))
        return real_store(k, v, kv_layer, slot_mapping)

    def counted(real):
        def prefill(*args, **kwargs):
            prefill_calls.append(1)
            return real(*args, **kwargs)

        return prefill

    monkeypatch.setattr(attention, "store_kv_host", store)
    for name in ("paged_prefill_attention_ref", "paged_prefill_attention_cpu"):  # the CPU engine's: _cpu
        monkeypatch.setattr(attention, name, counted(getattr(attention, name)))
    llm = tiered_llm(model_dir, num_kv_blocks=6, max_model_len=256, num_cpu_kv_blocks=40)
    llm.engine.bundle.runner.skip_prefill_attention = skip
    out = llm.generate([PROMPT], GREEDY)[0].token_ids
    assert len(out) == GREEDY.max_tokens
    num_layers = llm.engine.bundle.storage.layout.num_layers
    layer0 = stored[::num_layers]
    return layer0, len(prefill_calls), llm.engine.kv_stats().runner.cold


def test_fill_only_prefill_stores_the_kv_and_skips_attention(tiny_llama_dir, monkeypatch):
    normal, normal_calls, normal_cold = _run(tiny_llama_dir, monkeypatch, skip=False)
    filled, filled_calls, filled_cold = _run(tiny_llama_dir, monkeypatch, skip=True)
    assert normal_calls > 0 and filled_calls == 0
    assert len(filled) == len(normal) == -(-len(PROMPT) // 16)  # one per 16-token chunk
    for (k0, v0), (k1, v1) in zip(normal, filled, strict=True):
        torch.testing.assert_close(k1, k0, rtol=0, atol=0)
        torch.testing.assert_close(v1, v0, rtol=0, atol=0)
    # the prefill chunks' cold attention is gone; the decode rows still attend their cold blocks
    assert normal_cold is not None and filled_cold is not None
    assert 0 < filled_cold.cpu_bytes < normal_cold.cpu_bytes


def test_a_fill_only_row_has_no_ttft():
    rec = {"ttft_s": 3.2, "plan_ttft_s": 3.0, "sized_plan_ttft_s": 3.1, "decode_tok_s": 40.0}
    fill_only.mark(rec)
    assert rec == {
        "ttft_s": None,
        "plan_ttft_s": None,
        "sized_plan_ttft_s": None,
        "decode_tok_s": 40.0,
        "prefill_attention": "skipped",
    }
    with pytest.raises(SystemExit, match="one GPU"):
        fill_only.apply(SimpleNamespace(parallel=object()))  # type: ignore[arg-type]

"""QuantLinear's fused shards: adjacent shards of one type are one weight (one launch), a shard of
another type stays apart, and the output is the shards' rows in order either way."""

from __future__ import annotations

import torch

from kvspill.kernels.gguf_formats import dequantize_ref, random_quantized
from kvspill.model.quant import QuantLinear


def _shards(types: list[str], rows: list[int], k: int = 256):
    gen = torch.Generator().manual_seed(3)
    return [random_quantized(t, n, k, gen) for t, n in zip(types, rows, strict=True)]


def test_a_q4_k_m_qkv_runs_q_and_k_as_one_weight_and_v_apart() -> None:
    rows = [64, 16, 16]  # q, k, v
    shards = _shards(["Q4_K", "Q4_K", "Q6_K"], rows)
    layer = QuantLinear(256, rows, bias=False, dtype=torch.float32)
    layer.set_weight(shards)
    assert [(p.qtype, p.out_features) for p in layer.parts] == [("Q4_K", 80), ("Q6_K", 16)]
    assert [name for name, _ in layer.named_buffers()] == ["qweight_0", "qweight_1"]
    assert layer.weight_nbytes == sum(s.data.nbytes for s in shards)
    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(4))
    want = torch.cat([x @ dequantize_ref(s.data, s.qtype, 256).t() for s in shards], dim=-1)
    torch.testing.assert_close(layer(x), want, rtol=1e-5, atol=1e-4)


def test_runs_keep_their_row_order() -> None:
    shards = _shards(["Q6_K", "Q4_K", "Q4_K", "Q6_K", "Q6_K"], [16, 16, 32, 16, 16])
    layer = QuantLinear(256, [16, 16, 32, 16, 16], bias=True, dtype=torch.float32)
    torch.nn.init.normal_(layer.bias)
    layer.set_weight(shards)
    assert [(p.qtype, p.out_features) for p in layer.parts] == [("Q6_K", 16), ("Q4_K", 48), ("Q6_K", 32)]
    x = torch.randn(2, 256, generator=torch.Generator().manual_seed(5))
    want = torch.cat([x @ dequantize_ref(s.data, s.qtype, 256).t() for s in shards], dim=-1) + layer.bias
    torch.testing.assert_close(layer(x), want, rtol=1e-5, atol=1e-4)


def test_one_type_is_one_weight() -> None:
    layer = QuantLinear(256, [32, 32], bias=False, dtype=torch.float32)
    layer.set_weight(_shards(["Q4_K", "Q4_K"], [32, 32]))
    assert [(p.qtype, p.out_features) for p in layer.parts] == [("Q4_K", 64)]

"""Programmatic dependent launch (kernels/pdl.py): when it is on, and, on an sm_90+ GPU, that a
chain of PDL kernels replayed in a CUDA graph gives the bits of the same chain without PDL."""

from __future__ import annotations

import pytest
import torch

from kvspill.kernels import pdl
from kvspill.kernels.fp8_gemv import fp8_gemv
from kvspill.kernels.fp8_linear import quantize_weight_fp8
from kvspill.kernels.fused_ops import rms_norm, silu_and_mul


def test_pdl_is_off_on_the_cpu_and_under_the_switch(monkeypatch):
    assert pdl.pdl_meta(torch.device("cpu")) == {"PDL": False}
    monkeypatch.setattr(pdl, "_device_supports_pdl", lambda index: True)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setenv("KVSPILL_PDL", "1")
    assert pdl.pdl_meta(torch.device("cuda", 0)) == {"PDL": True, "launch_pdl": True}
    monkeypatch.setenv("KVSPILL_PDL", "0")
    assert pdl.pdl_meta(torch.device("cuda", 0)) == {"PDL": False}
    monkeypatch.setenv("KVSPILL_PDL", "1")
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the interpreter has no griddepcontrol
    assert pdl.pdl_meta(torch.device("cuda", 0)) == {"PDL": False}
    monkeypatch.delenv("TRITON_INTERPRET")
    monkeypatch.setattr(pdl, "_device_supports_pdl", lambda index: False)  # before sm_90
    assert pdl.pdl_meta(torch.device("cuda", 0)) == {"PDL": False}


def test_early_reads_need_pdl_and_follow_their_switch(monkeypatch):
    assert not pdl.early_reads(torch.device("cpu"))
    monkeypatch.setattr(pdl, "_device_supports_pdl", lambda index: True)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv("KVSPILL_EARLY_READS", raising=False)
    monkeypatch.setenv("KVSPILL_PDL", "1")
    assert pdl.early_reads(torch.device("cuda", 0))
    monkeypatch.setenv("KVSPILL_EARLY_READS", "0")
    assert not pdl.early_reads(torch.device("cuda", 0))
    monkeypatch.setenv("KVSPILL_EARLY_READS", "1")
    monkeypatch.setenv("KVSPILL_PDL", "0")  # nothing runs ahead of a wait that is not there
    assert not pdl.early_reads(torch.device("cuda", 0))


def _decode_mlp_chain(x, residual, norm_w, up, down):
    """RMSNorm (+ residual) -> fp8 gate_up -> SiLU-and-mul -> fp8 down -> RMSNorm (+ residual), 4 times:
    every kernel reads what the one before it wrote."""
    for _ in range(4):
        h, residual = rms_norm(x, norm_w, 1e-6, residual)
        x = fp8_gemv(silu_and_mul(fp8_gemv(h, *up)), *down)
    return rms_norm(x, norm_w, 1e-6, residual)


@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0), reason="needs an sm_90+ GPU"
)
def test_a_graph_of_pdl_kernels_equals_the_chain_without_pdl(monkeypatch):
    g = torch.Generator(device="cuda").manual_seed(0)
    hidden, inter = 2048, 8192
    up = quantize_weight_fp8(torch.randn(2 * inter, hidden, device="cuda", generator=g) * 0.02)
    down = quantize_weight_fp8(torch.randn(hidden, inter, device="cuda", generator=g) * 0.02)
    norm_w = torch.rand(hidden, device="cuda", generator=g).to(torch.bfloat16) + 0.5
    x0 = torch.randn(1, hidden, device="cuda", generator=g).to(torch.bfloat16)
    r0 = torch.randn(1, hidden, device="cuda", generator=g).to(torch.bfloat16)

    monkeypatch.setenv("KVSPILL_PDL", "0")
    want_out, want_res = _decode_mlp_chain(x0.clone(), r0.clone(), norm_w, up, down)

    monkeypatch.setenv("KVSPILL_PDL", "1")
    x, res = x0.clone(), r0.clone()
    _decode_mlp_chain(x.clone(), res.clone(), norm_w, up, down)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        res_in = res.clone()
        out, res_out = _decode_mlp_chain(x, res_in, norm_w, up, down)
    for _ in range(3):  # the captured residual add runs in place: reset it before each replay
        res_in.copy_(r0)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, want_out) and torch.equal(res_out, want_res)

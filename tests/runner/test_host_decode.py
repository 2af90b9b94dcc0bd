"""Decode rows over a host pool (runner/host_decode.py): every block by the C++ kernel, the
partial last block read up to its keys, equal the torch reference over the whole sequence; and
the CPU engine's decode takes that path."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kvspill.kernels.cpu_attention import load_kernel
from kvspill.kernels.decode_attention import paged_decode_attention_ref
from kvspill.kernels.kv_quant import quantize_kv
from kvspill.runner.host_decode import decode_parts, paged_decode_attention_host

pytestmark = pytest.mark.skipif(load_kernel() is None, reason="no C++ compiler to build the CPU kernel")


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int8, torch.float8_e4m3fn]
)
@pytest.mark.parametrize("block_size,num_kv_heads,group,head_dim", [(16, 2, 4, 64), (5, 3, 2, 24)])
def test_equals_the_reference_over_ragged_sequences(dtype, block_size, num_kv_heads, group, head_dim):
    torch.manual_seed(0)
    num_layers, num_blocks, layer = 3, 64, 1
    # lengths: under one block, exactly full blocks, full blocks plus a tail
    seq_lens = torch.tensor([1, block_size - 1, 2 * block_size, 3 * block_size + 2, 7 * block_size + 1])
    values = torch.randn(num_blocks, num_layers, 2, block_size, num_kv_heads, head_dim)
    max_blocks = int(-(-seq_lens.max() // block_size))
    tables = torch.from_numpy(
        np.random.default_rng(1)
        .permutation(num_blocks)[: len(seq_lens) * max_blocks]
        .reshape(len(seq_lens), -1)
    ).to(torch.int32)
    if dtype != torch.int8:  # the unfilled keys of a last block are never read: NaN there would show
        for s, n in enumerate(seq_lens.tolist()):
            values[tables[s, (n - 1) // block_size], :, :, (n - 1) % block_size + 1 :] = float("nan")
    pool = quantize_kv(values, dtype).contiguous()
    q = torch.randn(len(seq_lens), num_kv_heads * group, head_dim)
    got = (torch.full(q.shape, 7.0), torch.full(q.shape[:2], 7.0))
    want = (got[0].clone(), got[1].clone())
    parts = decode_parts(tables, seq_lens, block_size)
    assert parts.last_tokens.tolist() == [1, block_size - 1, block_size, 2, 1]
    paged_decode_attention_host(q, pool[:, layer], parts, 0.25, got, num_threads=2)
    paged_decode_attention_ref(q, pool[:, layer], tables, seq_lens, 0.25, out=want)
    atol = 2e-2 if dtype == torch.bfloat16 else 2e-5  # bf16 pools: q . k in bf16, as on the GPU
    torch.testing.assert_close(got[0], want[0], atol=atol, rtol=1e-3)
    torch.testing.assert_close(got[1], want[1], atol=atol, rtol=1e-3)


def test_the_cpu_engine_decodes_through_the_kernel(tiny_llama_dir, monkeypatch):
    """The engine on the CPU device calls it for every decode layer, and its greedy tokens equal
    those of the torch reference path."""
    from kvspill.llm import LLM
    from kvspill.runner import attention as attention_module
    from kvspill.sampling_params import SamplingParams

    prompt = torch.randint(3, 256, (70,), generator=torch.Generator().manual_seed(3)).tolist()
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    llm = LLM(str(tiny_llama_dir), device="cpu", dtype="float32", enable_prefix_caching=False)
    calls = []
    real = attention_module.paged_decode_attention_host
    monkeypatch.setattr(
        attention_module, "paged_decode_attention_host", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    got = llm.generate([prompt], params)[0].token_ids
    assert len(calls) == 23 * llm.engine.bundle.loaded.num_layers  # every decode step, every layer
    monkeypatch.setattr(attention_module, "load_kernel", lambda: None)
    want = llm.generate([prompt], params)[0].token_ids
    assert got == want

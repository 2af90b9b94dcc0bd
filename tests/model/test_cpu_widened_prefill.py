"""A CPU step of CPU_WIDE_MIN_TOKENS tokens or more over fp16 weights runs its activations in
fp32 (model/layers.cpu_widens): the projections widen their weights (or, for a few rows, narrow
x), and a decode step stays in fp16."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kvspill.model.layers import CPU_WIDE_MIN_TOKENS, cpu_widens, dense_linear


def test_widened_rows_multiply_the_widened_weight_and_bias():
    g = torch.Generator().manual_seed(0)
    weight = (torch.randn(48, 64, generator=g) * 0.1).half()
    bias = torch.randn(48, generator=g).half()
    many = torch.randn(CPU_WIDE_MIN_TOKENS, 64, generator=g)
    got = dense_linear(many, weight, bias)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, F.linear(many, weight.float(), bias.float()), rtol=0, atol=0)
    few = torch.randn(CPU_WIDE_MIN_TOKENS - 1, 64, generator=g)  # e.g. the lm_head's sampled rows
    got = dense_linear(few, weight, bias)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, F.linear(few.half(), weight, bias).float(), rtol=0, atol=0)


def test_which_steps_widen():
    assert cpu_widens(torch.zeros(CPU_WIDE_MIN_TOKENS, 4, dtype=torch.float16))
    assert not cpu_widens(torch.zeros(CPU_WIDE_MIN_TOKENS - 1, 4, dtype=torch.float16))  # decode steps
    assert not cpu_widens(torch.zeros(64, 4, dtype=torch.float32))
    assert not cpu_widens(torch.zeros(64, 4, dtype=torch.bfloat16))  # not measured: left as it is


def test_a_cpu_prefill_runs_in_fp32_and_its_decode_in_fp16(tiny_qwen2_dir):
    """Qwen2's qkv bias included; the engine's tokens come out and the layers saw the dtypes."""
    from kvspill.llm import LLM
    from kvspill.sampling_params import SamplingParams

    llm = LLM(str(tiny_qwen2_dir), device="cpu", dtype="float16", enable_prefix_caching=False)
    seen: list[torch.dtype] = []
    layer = llm.engine.bundle.loaded.model.model.layers[0]
    hook = layer.register_forward_pre_hook(lambda _m, args: seen.append(args[1].dtype))
    params = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True)
    long_prompt = list(range(3, 3 + 2 * CPU_WIDE_MIN_TOKENS))
    out = llm.generate([long_prompt], params)[0].token_ids
    assert seen == [torch.float32, torch.float16, torch.float16] and len(out) == 3
    seen.clear()
    llm.generate([list(range(3, 3 + CPU_WIDE_MIN_TOKENS - 1))], params)
    assert seen == [torch.float16] * 3
    hook.remove()

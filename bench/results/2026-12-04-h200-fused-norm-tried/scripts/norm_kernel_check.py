import os, torch, pytest
from kvspill.kernels import gguf_gemv
from kvspill.kernels.gguf_formats import random_quantized, dequantize_ref
from kvspill.kernels.fused_ops import rms_norm_ref

@pytest.mark.parametrize("qtype", ["Q4_K", "Q6_K"])
@pytest.mark.parametrize("bias", [False, True])
def test_normed(qtype, bias):
    gen = torch.Generator().manual_seed(3)
    K, N = 9 * 256, 19
    w = random_quantized(qtype, N, K, gen)
    x = (torch.randn((1, K), generator=gen) * 3).to(torch.bfloat16)
    g = (torch.rand((K,), generator=gen) + 0.5).to(torch.bfloat16)
    b = torch.randn((N,), generator=gen).to(torch.bfloat16) if bias else None
    out = torch.empty((1, N), dtype=torch.float32)
    launch = gguf_gemv._launch_q4k_one_token if qtype == "Q4_K" else gguf_gemv._launch_q6k_int16x
    launch(x, w, b, out, norm=(g, 1e-5))
    api = gguf_gemv.quant_matmul_gemv_normed(x, w, g, 1e-5, bias=b)
    torch.testing.assert_close(api.float(), out, rtol=2**-7, atol=0)  # the interpreter truncates fp32 -> bf16
    wd = dequantize_ref(w.data, qtype, K).double()
    xd = x.double()
    exact = (xd * torch.rsqrt((xd ** 2).mean() + 1e-5) * g.double()) @ wd.t()
    if b is not None:
        exact += b.double()
    unfused = gguf_gemv.quant_matmul_gemv(rms_norm_ref(x, g, 1e-5), w, b)
    print(qtype, float((out.double() - exact).abs().max() / exact.abs().max()), float((unfused.double() - exact).abs().max() / exact.abs().max()))
    torch.testing.assert_close(out.double(), exact, rtol=0, atol=2e-4 * float(exact.abs().max()))

"""On CUDA: the fused one-token GEMVs against the norm / activation kernel then the GEMV, real shapes."""
import torch
from kvspill.kernels.fp8_gemv import dense_gemv, fp8_gemv, rms_norm_gemv, silu_mul_gemv
from kvspill.kernels.fp8_linear import quantize_weight_fp8
from kvspill.kernels.fused_ops import rms_norm, silu_and_mul

g = torch.Generator(device="cuda").manual_seed(0)
for hidden, inter, qkv in ((2048, 8192, 3072), (4096, 14336, 6144)):
    x = torch.randn(1, hidden, device="cuda", generator=g).bfloat16()
    res = torch.randn(1, hidden, device="cuda", generator=g).bfloat16()
    nw = (1 + 0.1 * torch.randn(hidden, device="cuda", generator=g)).bfloat16()
    w = (torch.randn(qkv, hidden, device="cuda", generator=g) * 0.02).bfloat16()
    wq, sc = quantize_weight_fp8(w.float())
    out, new_res = rms_norm_gemv(x, res, nw, 1e-5, w)
    normed, want_res = rms_norm(x, nw, 1e-5, res.clone())
    want = dense_gemv(normed, w)
    d = (out.float() - want.float()).abs().max().item()
    print(f"hidden {hidden} norm+dense: max |diff| {d:.3g} (max |out| {want.abs().max().item():.3g}), residual equal {torch.equal(new_res, want_res)}, bit-equal {torch.equal(out, want)}")
    out8, _ = rms_norm_gemv(x, res, nw, 1e-5, wq, sc)
    want8 = fp8_gemv(normed, wq, sc)
    print(f"  norm+fp8: bit-equal {torch.equal(out8, want8)}, max |diff| {(out8.float() - want8.float()).abs().max().item():.3g}")
    gu = torch.randn(1, 2 * inter, device="cuda", generator=g).bfloat16()
    wd = (torch.randn(hidden, inter, device="cuda", generator=g) * 0.02).bfloat16()
    o2, w2 = silu_mul_gemv(gu, wd), dense_gemv(silu_and_mul(gu), wd)
    print(f"  silu+dense: bit-equal {torch.equal(o2, w2)}, max |diff| {(o2.float() - w2.float()).abs().max().item():.3g}")

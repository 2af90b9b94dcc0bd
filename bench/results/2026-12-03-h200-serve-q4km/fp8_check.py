"""On CUDA: fp8_gemv at gemv_config's new fp8 tiles against fp8_gemv_ref, Llama 8B and Qwen2.5-7B shapes."""
import torch
from kvspill.kernels.fp8_gemv import fp8_gemv, fp8_gemv_ref, gemv_config
from kvspill.kernels.fp8_linear import quantize_weight_fp8

g = torch.Generator(device="cuda").manual_seed(0)
for n, k in ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (4608, 3584), (37888, 3584), (3584, 18944), (3584, 3584)):
    w, s = quantize_weight_fp8(torch.randn(n, k, device="cuda", generator=g) * 0.02)
    x = torch.randn(1, k, device="cuda", generator=g).bfloat16()
    out, ref = fp8_gemv(x, w, s).float(), fp8_gemv_ref(x, w, s, None).float()
    err = ((out - ref).abs().max() / ref.abs().max()).item()
    print(f"{n}x{k} {tuple(gemv_config(1, n, k, 1))}: max err / max |ref| {err:.2e}", "OK" if err < 1e-2 else "BAD")

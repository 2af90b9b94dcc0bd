"""One 8B MLP at batch 1 (gate_up -> SiLU -> down) with and without SiLU fused into gate_up, per weight format,
graph replays over weight copies past L2 (PDL as in the engine). Also gate_up alone, fused and not."""
import json, sys, torch
from kvspill.bench.kernels_gguf import random_weight_cuda, _bench_ms
from kvspill.kernels.fp8_gemv import dense_gemv, fp8_gemv
from kvspill.kernels.fp8_linear import quantize_weight_fp8
from kvspill.kernels.fused_ops import silu_and_mul
from kvspill.kernels.gguf_gemv import quant_matmul_gemv
from kvspill.kernels import fused_ops, pdl
from kvspill.kernels.triton_compat import tl, triton

H, I, COPIES = 4096, 14336, 3
torch.manual_seed(0)

@triton.jit
def _noop(x_ptr, PDL: tl.constexpr = False):
    pdl.pdl_wait(PDL)

def noop(x):
    _noop[(1,)](x, **pdl.pdl_meta(x.device))

def make(fmt):
    if fmt == "q4k":
        gu = [random_weight_cuda("Q4_K", 2 * I, H, seed=s) for s in range(COPIES)]
        dn = [random_weight_cuda("Q4_K", H, I, seed=10 + s) for s in range(COPIES)]
        g = lambda x, w, silu=False: quant_matmul_gemv(x, w, None, silu_mul=silu)
        return gu, dn, g
    if fmt == "q4k_q6down":
        gu = [random_weight_cuda("Q4_K", 2 * I, H, seed=s) for s in range(COPIES)]
        dn = [random_weight_cuda("Q6_K", H, I, seed=10 + s) for s in range(COPIES)]
        g = lambda x, w, silu=False: quant_matmul_gemv(x, w, None, silu_mul=silu)
        return gu, dn, g
    if fmt == "bf16":
        gu = [torch.randn(2 * I, H, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(COPIES)]
        dn = [torch.randn(H, I, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(COPIES)]
        g = lambda x, w, silu=False: dense_gemv(x, w, None, silu_mul=silu)
        return gu, dn, g
    gu = [quantize_weight_fp8(torch.randn(2 * I, H, device="cuda") * 0.02) for _ in range(COPIES)]
    dn = [quantize_weight_fp8(torch.randn(H, I, device="cuda") * 0.02) for _ in range(COPIES)]
    g = lambda x, w, silu=False: fp8_gemv(x, w[0], w[1], None, silu_mul=silu)
    return gu, dn, g

res = {}
x = torch.randn(1, H, device="cuda", dtype=torch.bfloat16)
for fmt in sys.argv[1:] or ["q4k", "q4k_q6down", "bf16", "fp8"]:
    gu, dn, g = make(fmt)
    variants = {
        "gate_up": lambda i: g(x, gu[i]),
        "gate_up_fused": lambda i: g(x, gu[i], True),
        "gate_up+silu": lambda i: silu_and_mul(g(x, gu[i])),
        "mlp_two": lambda i: g(silu_and_mul(g(x, gu[i])), dn[i]),
        "mlp_fused": lambda i: g(g(x, gu[i], True), dn[i]),
    }

    def fused_then_noop(i):  # a one-program PDL kernel between: is it the launch, or what the launch orders?
        h = g(x, gu[i], True)
        noop(h)
        return g(h, dn[i])

    variants["mlp_fused_noop"] = fused_then_noop
    # exactness on the GPU
    a, b = silu_and_mul(g(x, gu[0])), g(x, gu[0], True)
    res[f"{fmt} equal"] = bool(torch.equal(a, b))
    for name, fn in variants.items():
        fn(0)
        torch.cuda.synchronize()
        def step(fn=fn):
            for i in range(COPIES):
                fn(i)
        us = [_bench_ms(step, rep=100) * 1e3 / COPIES for _ in range(3)]
        res[f"{fmt} {name}"] = round(min(us), 2)
        print(fmt, name, [round(u, 2) for u in us], flush=True)
    del gu, dn
    torch.cuda.empty_cache()
print(json.dumps(res, indent=1))

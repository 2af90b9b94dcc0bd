import sys, torch
import kvspill.bench.kv_quality as q
from kvspill.kernels.kv_quant import hadamard, rotate
mode, basis_mode = sys.argv[1], sys.argv[2]
F8 = torch.float8_e4m3fn
stats = {}
def rnd(x):
    if mode == "scale1":
        return x.to(F8).float()
    if mode == "token":  # per token per head
        s = x.abs().amax(-1, keepdim=True).clamp_min(1e-12) / 448
        return (x / s).to(F8).float() * s
    if mode == "tensor":  # per call (one layer's tensor)
        s = x.abs().amax().clamp_min(1e-12) / 448
        return (x / s).to(F8).float() * s
def sr(x, kv_dtype):
    stats.setdefault("n",0); stats["n"]+=1
    a = x.abs()
    stats.setdefault("sub",[]).append(float((a < 2**-6).float().mean()))
    if basis_mode == "hadamard":
        b = hadamard(x.shape[-1]); return rotate(rnd(rotate(x, b)), b)
    return rnd(x)
q.stored_and_read = sr
q.main(["--kv-cache-dtype", "fp8", "--tokens", "2048", "--greedy-tokens", "0", "--out", f"/tmp/fp8x/{mode}_{basis_mode}.json"])
import statistics; print("frac below e4m3 min normal:", statistics.mean(stats["sub"]))

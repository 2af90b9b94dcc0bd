import sys
import torch
import kvspill.bench.kv_quality as kq
from kvspill.kernels.kv_quant import hadamard, rotate
mode = sys.argv[1]
def fp8_rows(x):
    s = x.float().abs().amax(-1, keepdim=True).clamp(min=1e-12) / 448.0
    return (x.float() / s).to(torch.float8_e4m3fn).float() * s
def stored_and_read(x, kv_dtype):
    if mode == "scale":
        return fp8_rows(x)
    basis = hadamard(x.shape[-1])
    return rotate(fp8_rows(rotate(x, basis)), basis)
kq.stored_and_read = stored_and_read
kq.main(["--kv-cache-dtype", "fp8", "--tokens", "2048", "--greedy-tokens", "0", "--out", f"/tmp/sweep/fp8_{mode}.json"])

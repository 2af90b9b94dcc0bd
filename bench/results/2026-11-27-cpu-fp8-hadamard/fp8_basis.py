import sys, torch
import kvspill.bench.kv_quality as q
from kvspill.kernels.kv_quant import dequantize_kv, hadamard, quantize_kv, rotate
orig = q.stored_and_read
def rot(x, kv_dtype):
    basis = hadamard(x.shape[-1])
    return rotate(dequantize_kv(quantize_kv(rotate(x, basis), kv_dtype)), basis)
if sys.argv[1] == "hadamard":
    q.stored_and_read = rot
q.main(["--kv-cache-dtype", sys.argv[2], "--tokens", "2048", "--greedy-tokens", "0", "--out", f"/tmp/fp8_{sys.argv[1]}_{sys.argv[2]}.json"])

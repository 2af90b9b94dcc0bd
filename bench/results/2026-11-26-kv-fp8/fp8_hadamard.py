import sys, json
import torch
import kvspill.bench.kv_quality as kq
from kvspill.kernels.kv_quant import dequantize_kv, hadamard, quantize_kv, rotate
mode = sys.argv[1]
if mode == "rot":
    def stored_and_read(x, kv_dtype):
        basis = hadamard(x.shape[-1])
        return rotate(dequantize_kv(quantize_kv(rotate(x, basis), kv_dtype)), basis)
    kq.stored_and_read = stored_and_read
kq.main(["--kv-cache-dtype", "fp8", "--tokens", "2048", "--greedy-tokens", "0", "--out", f"/tmp/sweep/fp8_{mode}.json"])

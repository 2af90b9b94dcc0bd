"""Compile the decode split kernel for sm_90 here (CPU): PDL + prefetch + V early build?"""
import sys, inspect
sys.path.insert(0, "bench/results/2026-12-03-h200-gemv-one-token")
from aot import compile_kernel, report
import torch; torch.version.cuda = "12.8"
from kvspill.kernels import decode_attention as da
fn = da._decode_split_kernel
names = list(inspect.signature(fn.fn).parameters)
ptrs = {"q_ptr": "*bf16", "kv_ptr": "*bf16", "scale_ptr": "*fp32", "bt_ptr": "*i32", "seq_lens_ptr": "*i32",
        "o_ptr": "*fp32", "lse_ptr": "*fp32", "scale_log2": "fp32"}
const = dict(BLOCK_SIZE=16, GROUP=4, GROUP_PAD=16, HEAD_DIM=128, BLOCK_N=64, DOT_PRECISION="ieee", DOT_IN_F32=False, INT8=False, PDL=True)
sig = {}
for n in names:
    if n in const: sig[n] = "constexpr"
    else: sig[n] = ptrs.get(n, "i32")
attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if n.endswith("_ptr") or n.startswith("stride") and n not in ("stride_qs",)}
k = compile_kernel(fn, sig, const, num_warps=4, attrs=attrs)
sass = report(k, "split")
print("PREFETCH lines in SASS:", sass.count("CCTL") , sass.count("PREFETCH"), "griddep:", sass.count("ACQBULK"), [l for l in sass.splitlines() if "DEPBAR" in l or "griddep" in l.lower()][:3])
import re, collections
print(collections.Counter(re.findall(r"(LDG\.[A-Z0-9_.]+|CCTL[A-Z0-9_.]*|LDGSTS[A-Z0-9_.]*)", sass)))

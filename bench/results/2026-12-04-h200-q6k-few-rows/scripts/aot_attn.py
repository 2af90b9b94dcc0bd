"""sm_90 compile of the decode split kernel: registers, shared memory, SASS counts."""
import sys, inspect
sys.path.insert(0, ".devbench/s43")
import torch; torch.version.cuda = "12.8"
from aot import report
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import triton
from kvspill.kernels import decode_attention as da

fn = da._decode_split_kernel
names = list(inspect.signature(fn.fn).parameters)
ptrs = {"q_ptr": "*bf16", "kv_ptr": "*bf16", "scale_ptr": "*fp32", "bt_ptr": "*i32", "seq_lens_ptr": "*i32",
        "o_ptr": "*fp32", "lse_ptr": "*fp32", "scale_log2": "fp32"}
cfgs = [tuple(map(int, a.split(","))) for a in sys.argv[1:]] or [(64, 4, 2), (64, 4, 1), (32, 4, 2), (64, 4, 3), (128, 4, 2), (64, 8, 2)]
for block_n, warps, stages in cfgs:
    const = dict(BLOCK_SIZE=16, GROUP=4, GROUP_PAD=16, HEAD_DIM=128, BLOCK_N=block_n, DOT_PRECISION="tf32",
                 DOT_IN_F32=False, INT8=False, PDL=True)
    sig = {n: ("constexpr" if n in const else ptrs.get(n, "i32")) for n in names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if n.endswith("_ptr") or n in ("stride_cb", "stride_ckv", "stride_cs", "stride_ch", "stride_qs", "stride_qh")}
    k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=const, attrs=attrs), target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps, num_stages=stages))
    print("cfg", block_n, warps, stages, "shared", k.metadata.shared)
    report(k, f"split {block_n}/{warps}/{stages}")

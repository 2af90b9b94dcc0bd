import sys, inspect
sys.path.insert(0, ".devbench/s43")
import torch; torch.version.cuda = "12.8"
from aot import report
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import triton
import triton.language as tl
from kvspill.kernels import gguf_gemv_int16x as g
from kvspill.kernels import gguf_mma as m
def build(fn, const, warps, name, stages=1, ptrs=None):
    names = list(inspect.signature(fn.fn).parameters)
    ptrs = ptrs or {"x_ptr": "*bf16", "w_ptr": "*u8", "bias_ptr": "*bf16", "out_ptr": "*bf16"}
    sig = {n: ("constexpr" if n in const else ptrs.get(n, "i32")) for n in names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if n.endswith("_ptr") or n == "stride_w"}
    k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=const, attrs=attrs), target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps, num_stages=stages))
    report(k, name)
for even in (False, True):
    build(g.q4k_int16x_kernel, dict(HAS_LINEAR_BIAS=False, SB=16, BLOCK_N=8, USE_ASM=True, EVEN_K=even, PDL=True), 2, f"q4k 4096/8/2 even {even}")
    build(g.q6k_int16x_kernel, dict(NSUB=1, BLOCK_N=2, HAS_LINEAR_BIAS=False, USE_ASM=True, EVEN_K=even, PDL=True), 1, f"q6k 512/2/1 even {even}")
mp = {"x_ptr": "*bf16", "xs_ptr": "*bf16", "w_ptr": "*u8", "bias_ptr": "*bf16", "out_ptr": "*bf16", "part_ptr": "*fp32", "counter_ptr": "*i32"}
for even in (False, True):
    c = dict(T_PAD=8, BLOCK_N=32, SPLIT_K=8, MAGIC=False, HAS_BIAS=False, DOT_DTYPE=tl.bfloat16, WHOLE=False, WORDS=True, TWO_ACC=True, EVEN_N=even, PDL=True)
    build(m._q4k_mma_kernel, c, 2, f"mma q4k t8 even {even}", stages=3, ptrs=mp)
    c = dict(T_PAD=8, BLOCK_N=32, SPLIT_K=16, MAGIC=False, HAS_BIAS=False, DOT_DTYPE=tl.bfloat16, WHOLE=False, WORDS=True, TWO_ACC=False, EVEN_N=even, PDL=True)
    build(m._q6k_mma_kernel, c, 2, f"mma q6k t8 even {even}", stages=2, ptrs=mp)

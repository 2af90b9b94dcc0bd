import sys, inspect
sys.path.insert(0, ".devbench/s43")
import torch; torch.version.cuda = "12.8"
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from aot import report
from kvspill.kernels import gguf_mma as gm

def build(qtype, t_pad, block_n, warps, stages, split, two, name):
    fn = gm._q4k_mma_kernel if qtype == "Q4_K" else gm._q6k_mma_kernel
    names = list(inspect.signature(fn.fn).parameters)
    const = dict(T_PAD=t_pad, BLOCK_N=block_n, SPLIT_K=split, MAGIC=False, HAS_BIAS=False,
                 DOT_DTYPE=tl.bfloat16, WHOLE=False, WORDS=True, TWO_ACC=two, PDL=True)
    ptrs = {"x_ptr": "*bf16", "xs_ptr": "*bf16", "w_ptr": "*u8", "bias_ptr": "*bf16", "out_ptr": "*bf16",
            "part_ptr": "*fp32", "counter_ptr": "*i32"}
    sig = {n: ("constexpr" if n in const else ptrs.get(n, "i32")) for n in names}
    div = [n for n in names if n.endswith("_ptr") or n in ("stride_x", "stride_xs", "stride_o", "rows")]
    if qtype == "Q4_K":
        div.append("stride_w")
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if n in div}
    k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=const, attrs=attrs), target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps, num_stages=stages))
    sass = report(k, name)
    open(f".devbench/s44/{name}.sass", "w").write(sass)

for two in (False, True):
    build("Q4_K", 8, 32, 2, 3, 8, two, f"mma_q4_{int(two)}")
    build("Q6_K", 8, 32, 2, 3, 16, two, f"mma_q6_{int(two)}")

"""SASS census of the Q4_K / Q6_K words-form tensor-core kernel for sm_90 (CPU AOT)."""
import sys, inspect, re, collections
sys.path.insert(0, ".devbench/s43")
import torch; torch.version.cuda = "12.8"
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from aot import report
from kvspill.kernels import gguf_mma as gm

def build(qtype="Q4_K", t_pad=16, block_n=64, warps=4, stages=3, split=4, dump=None):
    fn = gm._q4k_mma_kernel if qtype == "Q4_K" else gm._q6k_mma_kernel
    names = list(inspect.signature(fn.fn).parameters)
    import triton.language as tl
    const = dict(T_PAD=t_pad, BLOCK_N=block_n, SPLIT_K=split, MAGIC=False, HAS_BIAS=False,
                 DOT_DTYPE=tl.bfloat16, WHOLE=False, WORDS=True, PDL=True)
    ptrs = {"x_ptr": "*bf16", "xs_ptr": "*bf16", "w_ptr": "*u8", "bias_ptr": "*bf16", "out_ptr": "*bf16",
            "part_ptr": "*fp32", "counter_ptr": "*i32"}
    sig = {n: ("constexpr" if n in const else ptrs.get(n, "i32")) for n in names}
    div = [n for n in names if n.endswith("_ptr") or n in ("stride_x", "stride_xs", "stride_o", "rows")]
    if qtype == "Q4_K":
        div.append("stride_w")
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if n in div}
    src = ASTSource(fn=fn, signature=sig, constexprs=const, attrs=attrs)
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps, num_stages=stages))
    sass = report(k, f"{qtype} T{t_pad} N{block_n} w{warps} s{stages}")
    if dump:
        open(dump, "w").write(sass)
        open(dump + ".ptx", "w").write(k.asm["ptx"])
        open(dump + ".ttgir", "w").write(k.asm["ttgir"])
    return sass

if __name__ == "__main__":
    qtype = sys.argv[1] if len(sys.argv) > 1 else "Q4_K"
    build(qtype, dump=f".devbench/s43/{qtype}.sass")

import sys
import torch; torch.version.cuda = "12.8"
sys.path.insert(0, "bench/results/2026-12-03-h200-mma-sync")
from aot import compile_kernel, report
from kvspill.kernels import gguf_mma as g
from kvspill.kernels.triton_compat import tl
sig = {"x_ptr":"*bf16","xs_ptr":"*fp32","w_ptr":"*u8","bias_ptr":"*bf16","out_ptr":"*fp32","rows":"i32","num_blocks":"i32","num_tokens":"i32",
       "stride_x":"i32","stride_xs":"i32","stride_w":"i32","stride_o":"i32","part_ptr":"*fp32","counter_ptr":"*i32","pairs_ptr":"*i32"}
for spec in sys.argv[1:]:
    q5, form, bn, warps, tpad, stages = spec.split(",")
    c = dict(T_PAD=int(tpad), BLOCK_N=int(bn), SPLIT_K=4, MAGIC=form == "magic", HAS_BIAS=False, DOT_DTYPE=tl.bfloat16,
             WHOLE=form == "whole", WORDS=False, TWO_ACC=False, PDL=True, PAIR_DTYPE=None, Q5=q5 == "1")
    s = dict(sig, **{k: "constexpr" for k in c})
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    src = ASTSource(fn=g._q4k_mma_kernel, signature=s, constexprs=c)
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=int(warps), num_stages=int(stages)))
    report(k, f"Q5={q5} {form} n{bn} w{warps} t{tpad} st{stages}")

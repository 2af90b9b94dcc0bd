"""The Q4_K words form (tensor cores, scale pairs in bf16, the gguf_mma kernel) compiled on the dev
host for sm_90 as the device would (every constexpr given, see aot_int16x.py): `python
aot_words.py T_PAD,BLOCK_N,WARPS,STAGES,SPLIT_K,TWO_ACC OUT_PREFIX` writes OUT_PREFIX.ptx and
.ttgir and prints the TTGIR's layout conversions and shared-memory buffers (the header-pairs diffs
were judged by these: planes sent through shared memory show as 8 more `local_alloc`s of
32x32xbf16); `regs.sh TREE CONFIG words` adds ptxas' registers and load counts."""

import inspect
import sys

import torch
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

torch.version.cuda = "12.8"  # the CPU build: let Triton's CUDA backend load
from kvspill.kernels import gguf_mma as gm  # noqa: E402

fn = gm._q4k_mma_kernel
names = list(inspect.signature(fn.fn).parameters)
t_pad, block_n, warps, stages, split, two = (int(v) for v in sys.argv[1].split(","))
const = dict(T_PAD=t_pad, BLOCK_N=block_n, SPLIT_K=split, MAGIC=False, HAS_BIAS=False, DOT_DTYPE=tl.bfloat16,
             WHOLE=False, WORDS=True, TWO_ACC=bool(two), PDL=True, PAIR_DTYPE=tl.bfloat16, Q5=False, Q41=False)
ptrs = {"x_ptr": "*bf16", "xs_ptr": "*bf16", "w_ptr": "*u8", "bias_ptr": "*bf16", "out_ptr": "*bf16",
        "part_ptr": "*fp32", "counter_ptr": "*i32", "pairs_ptr": "*i32"}
sig = {n: ("constexpr" if n in const else ptrs.get(n, "i32")) for n in names}
div16 = ("stride_x", "stride_xs", "stride_o", "rows", "stride_w", "num_blocks")
attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if n.endswith("_ptr") or n in div16}
options = dict(num_warps=warps, num_stages=stages, launch_pdl=True)
kernel = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=const, attrs=attrs),
                        target=GPUTarget("cuda", 90, 32), options=options)
open(sys.argv[2] + ".ptx", "w").write(kernel.asm["ptx"])
ttgir = kernel.asm["ttgir"]
open(sys.argv[2] + ".ttgir", "w").write(ttgir)
print("convert_layout", ttgir.count("ttg.convert_layout"), "local_alloc", ttgir.count("ttg.local_alloc"))

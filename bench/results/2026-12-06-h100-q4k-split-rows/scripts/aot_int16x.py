"""The one-token Q4_K int16-x GEMV compiled on the dev host as the device compiles it (call 7's
Triton cache: Triton 3.6; Q5 and TWO given as constexprs, since left out they compile as run-time
branches and the kernel spills; launch_pdl, 3 stages, the integer arguments divisible by 16).
`python aot_int16x.py CHUNK,BLOCK_N,WARPS OUT_PREFIX [two]` writes OUT_PREFIX.ptx ("two": the TWO
form, the lane passes' two tokens); `regs.sh` runs ptxas and counts registers and loads. Run with
Triton 3.6 first on the path (`pip install --no-deps --target /tmp/t36 triton==3.6.0`) and the
kvspill tree to compile."""

import inspect
import sys

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

torch.version.cuda = "12.8"  # the CPU build: let Triton's CUDA backend load
from kvspill.kernels import gguf_gemv_int16x as g  # noqa: E402

fn = g.q4k_int16x_kernel
names = list(inspect.signature(fn.fn).parameters)
ptrs = {"x_ptr": "*bf16", "w_ptr": "*i8", "bias_ptr": "*bf16", "out_ptr": "*bf16"}
chunk, block_n, warps = (int(v) for v in sys.argv[1].split(","))
const = dict(SB=chunk // 256, BLOCK_N=block_n, HAS_LINEAR_BIAS=False, USE_ASM=True, PDL=True, Q5=False,
             TWO="two" in sys.argv[3:])
sig = {n: ("constexpr" if n in const else ptrs.get(n, "i32")) for n in names}
div16 = ("stride_w", "num_blocks", "rows", "stride_x", "stride_o")
attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if n.endswith("_ptr") or n in div16}
options = dict(num_warps=warps, num_stages=3, launch_pdl=True)
kernel = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=const, attrs=attrs),
                        target=GPUTarget("cuda", 90, 32), options=options)
open(sys.argv[2] + ".ptx", "w").write(kernel.asm["ptx"])

"""Compile a Triton kernel for sm_90 on this CPU machine: registers, spills, SASS op counts."""
import re, subprocess, sys, tempfile, collections
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

def compile_kernel(fn, signature, constexprs, num_warps=1, attrs=None):
    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs or {})
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=num_warps))
    return k

def report(k, name=""):
    meta = k.metadata
    cubin = k.asm["cubin"]
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin); f.flush()
        sass = subprocess.run([triton.__path__[0] + "/backends/nvidia/bin/cuobjdump", "-sass", f.name], capture_output=True, text=True).stdout
    ops = collections.Counter(re.findall(r"^\s+/\*[0-9a-f]{4}\*/\s+(?:@!?P\d\s+)?([A-Z0-9_.]+)", sass, re.M))
    kinds = collections.Counter()
    for op, c in ops.items():
        kinds[op.split(".")[0]] += c
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin); f.flush()
        res = subprocess.run([triton.__path__[0] + "/backends/nvidia/bin/cuobjdump", "-res-usage", f.name], capture_output=True, text=True).stdout
    m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", res)
    print(name, m.group(0) if m else res[-300:], "instrs", sum(ops.values()))
    print("  ", dict(kinds.most_common(22)))
    return sass

import sys; sys.path.insert(0, ".devbench/s43")
from aot_mma import build
import re, collections
def loop_body(sass):
    # the main loop: between the first backward-branch target and the branch
    lines = sass.splitlines()
    return lines
for qtype in sys.argv[1].split(","):
    for cfg in sys.argv[2:]:
        t, n, w, s = map(int, cfg.split("x"))
        sass = build(qtype, t_pad=t, block_n=n, warps=w, stages=s, dump=f".devbench/s43/{qtype}_{cfg}.sass")

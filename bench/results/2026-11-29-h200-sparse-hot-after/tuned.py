"""Session 25: python -m kvspill.bench (or w5_prof.py with --prof) with keys_graph.py's pick patched in."""
import json, runpy, sys
import kvspill.kernels.sparse_kernels as sk
import kvspill.kernels.block_select as bsel
from kvspill.bench import engine_bench

cfg = json.load(open(sys.argv[1]))
sk._BLOCKS_PER_PROGRAM, sk._KEYS_HEADS_PER_PROGRAM, sk._KEYS_WARPS = cfg["keys"]
sel = cfg["sel"]
w5 = {int(k.split("|")[1]): v[0] for k, v in sel.items() if k.startswith("W5") and v[1]}
w1 = {int(k.split("|")[1]): v[0] for k, v in sel.items() if k.startswith("W1") and v[1]}
reg = min((r for r in w5 if r in w1 and w1[r] <= w1.get(8192, 1e9) * 1.02), key=lambda r: w5[r], default=8192)
bsel.select_top_blocks.__defaults__ = (reg,)
print("tuned: keys", cfg["keys"], "register_blocks", reg, flush=True)
if sys.argv[2] == "--prof":
    sys.argv = ["w5_prof.py"] + sys.argv[3:]
    runpy.run_path(".devbench/s24/w5_prof.py", run_name="__main__")
else:
    sys.exit(engine_bench.main(sys.argv[2:]))

"""Session 24: python -m kvspill.bench with the kernel launch settings of a JSON file (sel_micro.py's pick)."""
import json, sys
import kvspill.kernels.sparse_kernels as sk
import kvspill.kernels.block_select as bsel
from kvspill.bench import engine_bench

cfg = json.load(open(sys.argv[1]))
sk._BLOCKS_PER_PROGRAM, sk._KEYS_HEADS_PER_PROGRAM, sk._KEYS_WARPS = cfg["keys"]
bsel._REGISTER_BLOCKS, bsel._PAIRWISE_RANK_MAX, regw = cfg["sel"]
bsel._warps = lambda np_: regw if np_ >= 16384 else (8 if np_ >= 4096 else 4)
print("tuned:", cfg)
sys.exit(engine_bench.main(sys.argv[2:]))

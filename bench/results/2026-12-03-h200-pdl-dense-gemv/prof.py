"""profile_decode with the dense GEMV switched off (DENSE=0) or on; the rest of argv goes through."""
import os, sys
import kvspill.model.layers as layers
if os.environ.get("DENSE", "1") == "0":
    layers.DENSE_GEMV_MAX_TOKENS = 0
from kvspill.bench.profile_decode import main
sys.exit(main(sys.argv[1:]))

"""profile_decode with gguf_mma_mixed.MIXED_Q6K_MMA_CONFIGS from a JSON file ({"8": {MmaConfig
fields}, ...}, sweep_mma_mixed.py's "best"): python with_mma_configs.py FILE -- PROFILE_DECODE_ARGS"""

import json
import runpy
import sys

from kvspill.kernels import gguf_mma_mixed
from kvspill.kernels.gguf_mma_configs import MmaConfig

for tile, fields in json.load(open(sys.argv[1])).items():
    gguf_mma_mixed.MIXED_Q6K_MMA_CONFIGS[int(tile)] = MmaConfig(**fields)
sys.argv = ["profile_decode", *sys.argv[3:]]
runpy.run_module("kvspill.bench.profile_decode", run_name="__main__")

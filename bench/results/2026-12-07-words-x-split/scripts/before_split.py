"""profile_decode with `words_x` as before the split (one program a super-block, 4 warps):
python before_split.py PROFILE_DECODE_ARGS."""

import runpy
import sys

from kvspill.kernels import gguf_mma_words

gguf_mma_words.words_x_split = lambda k, t_pad: (256, 4)
sys.argv = ["profile_decode", *sys.argv[1:]]
runpy.run_module("kvspill.bench.profile_decode", run_name="__main__", alter_sys=True)

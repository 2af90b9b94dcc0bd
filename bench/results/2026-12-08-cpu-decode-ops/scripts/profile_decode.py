"""cProfile of the embedded model's 129-token greedy decode on the CPU (the tree on PYTHONPATH),
the 35 functions of most own time.

    PYTHONPATH=TREE python profile_decode.py
"""

import cProfile
import pstats
import time

from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams

llm = LLM(None, device="cpu", max_model_len=2048)
prompt = list(range(100, 164))
params = SamplingParams(temperature=0, max_tokens=129, ignore_eos=True)
llm.generate([prompt], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))  # warm-up
start = time.perf_counter()
llm.generate([prompt], params)
print("wall, unprofiled:", round(time.perf_counter() - start, 3), "s")
profile = cProfile.Profile()
profile.enable()
llm.generate([prompt], params)
profile.disable()
pstats.Stats(profile).sort_stats("tottime").print_stats(35)

"""Decode tok/s (32 greedy tokens, two rounds) and the TTFT of a 64-token prompt of a model on the CPU.

python big.py MODEL DTYPE      e.g. random:llama-1b:q4_k_m bfloat16
"""

import json
import sys
import time

from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams

model = sys.argv[1]
llm = LLM(model, device="cpu", max_model_len=2048, dtype=sys.argv[2])
p = list(range(100, 164))


def gen(n, k):
    t = time.perf_counter()
    out = llm.generate(
        [[x + k for x in p]], SamplingParams(temperature=0, max_tokens=n, ignore_eos=True, detokenize=False)
    )
    return time.perf_counter() - t, out[0].token_ids


gen(4, 0)
rounds = []
for k in range(2):
    one, _ = gen(1, 10 + k)
    whole, toks = gen(33, 20 + k)
    rounds.append(round(32 / (whole - one), 2))
ttft = round(min(gen(1, 1000 + k)[0] for k in range(2)), 3)
print(json.dumps({"model": model, "dtype": sys.argv[2], "decode": rounds, "ttft64": ttft, "first": toks[:8]}))

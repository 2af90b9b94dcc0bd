"""Decode tok/s and TTFT of the embedded model on the CPU with one --quantization (none or gguf).

python ab.py none|gguf          (alternate the two; the README's rows)
"""

import json
import sys
import time

from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams


def run(quant, new_tokens=128):
    llm = LLM(None, device="cpu", max_model_len=4096, quantization=quant)
    prompt = list(range(100, 164))

    def gen(n, p=prompt):
        t = time.perf_counter()
        out = llm.generate([p], SamplingParams(temperature=0, max_tokens=n, ignore_eos=True))
        return time.perf_counter() - t, out[0].token_ids

    gen(8)
    rounds = []
    for _ in range(3):
        one, _ = gen(1)
        whole, toks = gen(new_tokens + 1)
        rounds.append(round(new_tokens / (whole - one), 1))
    ttft = {}
    for n in (128, 512, 2048):
        # A new prompt each time (the prefix cache would answer a repeated one).
        best = min(gen(1, [100 + (i * 7 + 31 * k + n) % 5000 for i in range(n)])[0] for k in range(2))
        ttft[n] = round(best, 3)
    import resource

    print(
        json.dumps(
            {
                "quant": quant,
                "decode": rounds,
                "ttft": ttft,
                "first": toks[:24],
                "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    run(sys.argv[1])

"""Greedy tokens of a random 8B Q4_K model with the one-token Q4_K kernel on or off: greedy.py on|off OUT.json"""
import json, sys
import torch
from kvspill.bench import profile_decode
from kvspill.kernels import gguf_gemv
from kvspill.sampling_params import SamplingParams

if sys.argv[1] in ("off", "ctl"):
    gguf_gemv.Q4K_ONE_TOKEN_CONFIG = None
if sys.argv[1] == "ctl":  # the exact kernel, another K chunk: only the fp32 reduction order differs
    gguf_gemv.FMA_CONFIG["Q4_K"] = (1024, 4, 1)
args = profile_decode._parse(["--shape", "llama-8b:q4_k", "--ctx", "1024", "--steps", "64"])
engine = profile_decode._engine(args)
gen = torch.Generator().manual_seed(0)
params = SamplingParams(temperature=0, max_tokens=128, ignore_eos=True, detokenize=False)
outs = {}
for i in range(3):
    print("request", i, flush=True)
    rid = engine.add_request(torch.randint(0, engine.vocab_size, (1024,), generator=gen).tolist(), params)
    for step in engine.run():
        for o in step.outputs:
            outs.setdefault(str(i), []).extend(o.delta_token_ids)
json.dump(outs, open(sys.argv[2], "w"))
print(sys.argv[1], {k: v[:12] for k, v in outs.items()})

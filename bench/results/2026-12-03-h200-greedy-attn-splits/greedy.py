"""Greedy tokens of a random model (3 prompts of 1,024 random ids, 128 tokens each):
greedy.py SHAPE OUT.json [old-fp8-tiles]   (run from the tree to test; `old-fp8-tiles` puts back
gemv_config's fp8 one-token tiles of before 0ec1f34: 8 rows, 1024-wide K chunks where N <= 4096)."""
import json, sys
import torch
from kvspill.bench import profile_decode
from kvspill.kernels import fp8_gemv
from kvspill.sampling_params import SamplingParams

if len(sys.argv) > 3 and sys.argv[3] == "old-fp8-tiles":
    new = fp8_gemv.gemv_config

    def old(num_tokens, n, k, weight_bytes=2):
        return new(num_tokens, n, k, 2)  # the 16-bit rule was every type's before

    fp8_gemv.gemv_config = old
args = profile_decode._parse(["--shape", sys.argv[1], "--ctx", "1024", "--steps", "64"])
engine = profile_decode._engine(args)
gen = torch.Generator().manual_seed(0)
params = SamplingParams(temperature=0, max_tokens=128, ignore_eos=True, detokenize=False)
outs = {}
for i in range(3):
    engine.add_request(torch.randint(0, engine.vocab_size, (1024,), generator=gen).tolist(), params)
    for step in engine.run():
        for o in step.outputs:
            outs.setdefault(str(i), []).extend(o.delta_token_ids)
json.dump(outs, open(sys.argv[2], "w"))
print(sys.argv[1:], {k: v[:8] for k, v in outs.items()})

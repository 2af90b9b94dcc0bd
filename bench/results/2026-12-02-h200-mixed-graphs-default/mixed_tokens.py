"""Greedy tokens of 8 concurrent requests (mixed steps: prefill chunks beside decodes), one engine per
process; run with KVSPILL_MIXED_CUDA_GRAPHS=0 and =1 and compare the json files."""
import json, sys, torch
from kvspill.bench import concurrent_bench as cb
from kvspill.bench.engine_bench import setup_engine
from kvspill.sampling_params import SamplingParams

shape, budget, out = sys.argv[1], sys.argv[2], sys.argv[3]
chunk = sys.argv[4] if len(sys.argv) > 4 else "4096"
args = cb._parse(["--shape", shape, "--vram-budget", budget, "--ctx", "1024", "--max-num-batched-tokens", chunk])
engine = setup_engine(args, 1024 + 80, max_num_seqs=16).engine
gen = torch.Generator().manual_seed(7)
ids = []
for i in range(8):
    prompt = torch.randint(0, 30000, (300 + 90 * i,), generator=gen).tolist()
    ids.append(engine.add_request(prompt, SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True, detokenize=False)))
toks = {r: [] for r in ids}
steps = 0
for step in engine.run():
    steps += 1
    for o in step.outputs:
        toks[o.req_id].extend(o.delta_token_ids)
json.dump([toks[r] for r in ids], open(out, "w"))
print("steps", steps, "mixed graphs", getattr(engine.runner, "mixed_graphs", None) is not None, flush=True)

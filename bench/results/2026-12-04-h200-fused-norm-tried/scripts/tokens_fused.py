"""Greedy tokens of a random model, the fused-norm prototype (FUSE=1) or not: prints 64 ids of 2 prompts."""
import os, sys, json
sys.path.insert(0, os.path.dirname(__file__))
if os.environ.get("FUSE") == "1":
    import fused_norm  # noqa: F401
import torch
from kvspill.config import EngineConfig
from kvspill.engine.core import LLMEngine
from kvspill.sampling_params import SamplingParams

engine = LLMEngine(EngineConfig(model=sys.argv[1], max_model_len=4096, max_num_seqs=8, enable_prefix_caching=False,
                                skip_tokenizer_init=True, kv_cache_memory_bytes=8 * 2**30))
gen = torch.Generator().manual_seed(0)
params = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True, detokenize=False)
outs = {}
for i in range(2):  # one at a time: batch-1 steps
    engine.add_request(torch.randint(0, engine.vocab_size, (512,), generator=gen).tolist(), params)
    for step in engine.run():
        for o in step.outputs:
            outs.setdefault(o.req_id, []).extend(o.delta_token_ids)
print(json.dumps(list(outs.values())))

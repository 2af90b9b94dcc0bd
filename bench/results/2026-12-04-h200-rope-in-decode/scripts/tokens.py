"""Greedy tokens of a random model with the current KVSPILL_FUSED_ROPE_DECODE: 48 ids of 2 prompts
one at a time (batch-1 steps), then of 3 prompts at once (3-sequence steps). Prints one JSON line.
PPS=N (the control): decode attention at N programs per SM instead of 4, i.e. other split counts,
the exact kernel's fp32 summation order changed and nothing else."""
import json
import os
import sys

import torch

from kvspill.kernels import decode_attention

if os.environ.get("PPS"):
    decode_attention._PROGRAMS_PER_SM = int(os.environ["PPS"])

from kvspill.config import EngineConfig
from kvspill.engine.core import LLMEngine
from kvspill.sampling_params import SamplingParams

engine = LLMEngine(EngineConfig(model=sys.argv[1], max_model_len=4096, max_num_seqs=8, enable_prefix_caching=False,
                                skip_tokenizer_init=True, kv_cache_memory_bytes=8 * 2**30, dtype="bfloat16"))
gen = torch.Generator().manual_seed(0)
params = SamplingParams(temperature=0, max_tokens=48, ignore_eos=True, detokenize=False)
outs = {}
for group in (1, 1, 3):
    for _ in range(group):
        engine.add_request(torch.randint(0, engine.vocab_size, (700,), generator=gen).tolist(), params)
    for step in engine.run():
        for o in step.outputs:
            assert o.error is None, o.error
            outs.setdefault(o.req_id, []).extend(o.delta_token_ids)
print(json.dumps(list(outs.values())))

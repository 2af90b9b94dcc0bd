"""Context shift on CUDA (issue 52): a 512-token context generating 1,536 tokens, per KV dtype,
CUDA graphs and async scheduling on; the kept keys turned by the Triton/torch path on the device."""
import json, time
import torch
from kvspill import LLM, SamplingParams

import gc, sys
for dtype in sys.argv[1:] or ("auto", "fp8", "int8"):
    t0 = time.time()
    llm = LLM("random:llama-1b", device="cuda", max_model_len=512, context_shift=True,
              kv_cache_dtype=dtype, vram_budget_bytes=8 * 2**30)
    load = time.time() - t0
    params = SamplingParams(max_tokens=1536, ignore_eos=True, temperature=0, detokenize=False)
    t1 = time.time()
    out = llm.generate([list(range(100, 400))], params)[0]
    dt = time.time() - t1
    ids = out.token_ids if hasattr(out, "token_ids") else None
    print(json.dumps(dict(kv_dtype=dtype, load_s=round(load, 1), output_tokens=out.num_output_tokens,
                          finish_reason=out.finish_reason, gen_s=round(dt, 2),
                          tok_s=round(out.num_output_tokens / dt, 1),
                          distinct_tokens=len(set(ids)) if ids else None,
                          card=torch.cuda.get_device_name(), async_scheduling=llm.engine.async_scheduling if hasattr(llm, "engine") else None)), flush=True)
    llm.close()
    del llm
    gc.collect()
    torch.cuda.empty_cache()

"""Dev only: greedy tokens of a TP engine (argv[1] = tensor_parallel_size), printed, for eager vs graphs."""
import sys
from kvspill.config import EngineConfig
from kvspill.engine import LLMEngine
from kvspill.sampling_params import SamplingParams
if __name__ == "__main__":
    tp = int(sys.argv[1])
    e = LLMEngine(EngineConfig(model="random:llama-1b", max_model_len=4096, tensor_parallel_size=tp, skip_tokenizer_init=True, vram_budget_bytes=16 * 2**30))
    p = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True, detokenize=False)
    e.add_request(list(range(100, 900)), p, req_id="a"); e.add_request(list(range(5, 300)), p, req_id="b")
    out = {}
    while e.has_unfinished_requests():
        for o in e.step():
            if o.finished: out[o.req_id] = o.token_ids
    print("TOKENS", tp, sorted(out.items()), flush=True)
    e.close()

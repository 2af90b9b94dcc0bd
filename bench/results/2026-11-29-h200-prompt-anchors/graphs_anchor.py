"""Dev only: sparse decode with prompt anchors on CUDA, graphed against eager (KVSPILL_SPARSE_CUDA_GRAPHS=0)
and against anchors off, on random llama-1b weights with 8K cold tokens; prints tokens agreement and counts."""
import os, sys, time
import torch
from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams

def run(window, graphs, budget=512):
    os.environ["KVSPILL_SPARSE_CUDA_GRAPHS"] = "1" if graphs else "0"
    llm = LLM("random:llama-1b", device="cuda", dtype="bfloat16", max_model_len=16384, skip_tokenizer_init=True,
              enable_prefix_caching=False, num_kv_blocks=200, num_cpu_kv_blocks=1200, hot_window_tokens=1024,
              max_num_batched_tokens=2048, max_num_seqs=1, cold_attention="sparse", sparse_budget_tokens=budget,
              sparse_prompt_window=window, sparse_prompt_share=0.5)
    prompt = torch.randint(10, 30000, (12000,), generator=torch.Generator().manual_seed(5)).tolist()
    t0 = time.time()
    out = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=64, ignore_eos=True))[0].token_ids
    dt = time.time() - t0
    runner = llm.engine.bundle.runner
    g = runner.sparse_graphs
    print(f"window={window} graphs={graphs}: {dt:.1f} s, replays {g.num_replays if g else None}, "
          f"captures {g.num_captures if g else None}, anchors {len(runner.cold.anchors.requests) if runner.cold.anchors else None}", flush=True)
    del llm; torch.cuda.empty_cache()
    return out

a_eager = run(32, False); a_graph = run(32, True); plain = run(0, True)
agree = lambda x, y: sum(i == j for i, j in zip(x, y))
print("anchors graphed == eager:", a_graph == a_eager, agree(a_graph, a_eager), "/ 64")
print("anchors vs plain (tokens alike):", agree(a_graph, plain), "/ 64")

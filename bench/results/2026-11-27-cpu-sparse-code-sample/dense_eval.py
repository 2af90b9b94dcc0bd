"""Dev only: sparse decode with some layers kept exact (all cold blocks), CPU path, for a task.
env: DENSE comma list of layers, IDX, BUDGET (256), LEN (2048), TASK (code), N samples drawn."""
import json, os, time
import torch
import kvspill.kv.cold_sparse as cs
from kvspill.kernels.decode_attention import paged_decode_attention_ref
from kvspill.kv.cold_math import merge_rows_into
from kvspill.eval.runner import hot_kv_kwargs
from kvspill.eval.tasks import TASKS, make_samples, score
from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams
from kvspill.types import TIER_CPU

DENSE = {int(x) for x in os.environ.get("DENSE", "").split(",") if x}
_orig = cs.SparseColdStep.attend


def attend(self, layer_idx, q_cold, scale, acc_o, acc_lse):
    if layer_idx not in DENSE:
        return _orig(self, layer_idx, q_cold, scale, acc_o, acc_lse)
    q = q_cold.index_select(0, self.rows)
    kv_layer = self.storage.tier_layer(TIER_CPU, layer_idx)
    for i, seq in enumerate(self.seqs):
        kv = kv_layer.index_select(0, seq.ids)
        n = kv.shape[0]
        table = torch.arange(n, dtype=torch.int32)[None]
        lens = torch.tensor([n * kv.shape[2]], dtype=torch.int32)
        o, lse = paged_decode_attention_ref(q[i : i + 1], kv, table, lens, scale)
        merge_rows_into(acc_o, acc_lse, self.rows[i : i + 1], o.float(), lse)


cs.SparseColdStep.attend = attend
budget = int(os.environ.get("BUDGET", 256))
length = int(os.environ.get("LEN", 2048))
kw = {"max_model_len": length, "device": "cpu", "dtype": "float32", **hot_kv_kwargs(256, length)}
kw.update(cold_attention="sparse", sparse_budget_tokens=budget) if budget else kw.update(cold_attention="stream")
llm = LLM(None, **kw)
count = lambda text: len(llm.engine.encode(text))
task = os.environ.get("TASK", "code")
idx = [int(x) for x in os.environ.get("IDX", "0,1,2,3,4").split(",")]
samples = make_samples(task, length, int(os.environ.get("N", max(idx) + 1)), 0, count)
samples = [samples[i] for i in idx]
t0 = time.time()
outs = llm.generate([s.prompt for s in samples], SamplingParams(temperature=0.0, max_tokens=TASKS[task][1]))
sc = [score(o.text, s.answers) for s, o in zip(samples, outs)]
print(json.dumps({"dense": sorted(DENSE), "budget": budget, "idx": idx, "scores": sc,
                  "outs": [o.text[:50] for o in outs], "s": round(time.time() - t0, 1)}), flush=True)

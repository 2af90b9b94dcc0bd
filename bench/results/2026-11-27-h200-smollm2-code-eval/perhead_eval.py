"""Dev only: sparse decode with one block list per kv head (each head its own top-B blocks by the
engine's score), on the CPU path, for the code task. env: IDX, BUDGET (256), LEN (2048), TASK."""
import json, os, time
import numpy as np
import torch
import kvspill.kv.cold_sparse as cs
from kvspill.kernels.attention_common import dense_attention_ref
from kvspill.kv.cold_math import merge_rows_into
from kvspill.kv.sparse_select import block_scores
from kvspill.eval.runner import hot_kv_kwargs
from kvspill.eval.tasks import TASKS, make_samples, score
from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams
from kvspill.types import TIER_CPU


def attend(self, layer_idx, q_cold, scale, acc_o, acc_lse):
    q = q_cold.index_select(0, self.rows)  # [num_seqs, H, D]
    kv_layer = self.storage.tier_layer(TIER_CPU, layer_idx)
    for i, seq in enumerate(self.seqs):
        assert list(seq.tier_index) == [TIER_CPU]
        s = block_scores(q[i][None], self._summary(seq, layer_idx)).float()  # [kvh, n]
        kvh, n = s.shape
        g = q.shape[1] // kvh
        o = torch.zeros((1, q.shape[1], q.shape[2]), dtype=torch.float32)
        lse = torch.full((1, q.shape[1]), float("-inf"))
        for h in range(kvh):
            order = torch.argsort(-s[h], stable=True)[: seq.num_selected].sort().values
            kv = kv_layer.index_select(0, seq.ids.index_select(0, order))  # [B, 2, bs, kvh, D]
            k = kv[:, 0, :, h].reshape(-1, 1, kv.shape[-1])
            v = kv[:, 1, :, h].reshape(-1, 1, kv.shape[-1])
            oh, lh = dense_attention_ref(q[i][h * g : (h + 1) * g][None], k, v, scale)
            o[0, h * g : (h + 1) * g] = oh[0]
            lse[0, h * g : (h + 1) * g] = lh[0]
        self.counts.selected_blocks += seq.num_selected
        self.counts.cold_blocks += n
        merge_rows_into(acc_o, acc_lse, self.rows[i : i + 1], o, lse)


if os.environ.get("PERHEAD", "1") == "1":
    cs.SparseColdStep.attend = attend
budget = int(os.environ.get("BUDGET", 256))
length = int(os.environ.get("LEN", 2048))
kw = {"max_model_len": length, "device": "cpu", "dtype": "float32", **hot_kv_kwargs(256, length),
      "cold_attention": "sparse", "sparse_budget_tokens": budget}
llm = LLM(None, **kw)
count = lambda text: len(llm.engine.encode(text))
task = os.environ.get("TASK", "code")
idx = [int(x) for x in os.environ.get("IDX", "0,1,2,3,4").split(",")]
samples = make_samples(task, length, max(idx) + 1, 0, count)
samples = [samples[i] for i in idx]
t0 = time.time()
outs = llm.generate([s.prompt for s in samples], SamplingParams(temperature=0.0, max_tokens=TASKS[task][1]))
sc = [score(o.text, s.answers) for s, o in zip(samples, outs)]
print(json.dumps({"perhead": os.environ.get("PERHEAD", "1"), "budget": budget, "idx": idx, "scores": sc,
                  "outs": [o.text[:45] for o in outs], "s": round(time.time() - t0, 1)}), flush=True)

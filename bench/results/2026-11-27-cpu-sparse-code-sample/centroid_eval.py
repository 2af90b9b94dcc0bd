"""Dev only: sparse decode plus the unselected blocks' centroids (mean k, mean v, weight block_size).
env: IDX, BUDGET, LEN, TASK, N, CENT=1|0."""
import json, math, os, time
import torch
import kvspill.kv.cold_sparse as cs
from kvspill.kv.cold_math import merge_rows_into
from kvspill.kv.sparse_select import select_from_keys
from kvspill.eval.runner import hot_kv_kwargs
from kvspill.eval.tasks import TASKS, make_samples, score
from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams
from kvspill.types import TIER_CPU

_orig = cs.SparseColdStep.attend
MODE = os.environ.get("CENT", "mean")


def attend(self, layer_idx, q_cold, scale, acc_o, acc_lse):
    _orig(self, layer_idx, q_cold, scale, acc_o, acc_lse)
    if MODE == "0":
        return
    q = q_cold.index_select(0, self.rows)
    kv_layer = self.storage.tier_layer(TIER_CPU, layer_idx)
    for i, seq in enumerate(self.seqs):
        chosen = select_from_keys(self._keys(seq, layer_idx, q[i]), seq.num_selected, seq.positions)
        mask = torch.ones(seq.num_cold, dtype=torch.bool)
        mask[chosen] = False
        if not mask.any():
            continue
        kv = kv_layer.index_select(0, seq.ids[mask]).float()  # [m, 2, bs, kvh, D]
        m, _, bs, kvh, D = kv.shape
        km, vm = kv[:, 0].mean(1), kv[:, 1].mean(1)  # [m, kvh, D]
        H = q.shape[1]
        g = H // kvh
        qg = q[i].float().view(kvh, g, D)
        logits = torch.einsum("mkd,kgd->kgm", km, qg) * scale + math.log(bs)
        lse = torch.logsumexp(logits, dim=-1)  # [kvh, g]
        p = torch.softmax(logits, dim=-1)
        o = torch.einsum("kgm,mkd->kgd", p, vm)
        merge_rows_into(acc_o, acc_lse, self.rows[i : i + 1], o.reshape(1, H, D), lse.reshape(1, H))


cs.SparseColdStep.attend = attend
budget = int(os.environ.get("BUDGET", 256))
length = int(os.environ.get("LEN", 2048))
kw = {"max_model_len": length, "device": "cpu", "dtype": "float32", **hot_kv_kwargs(256, length),
      "cold_attention": "sparse", "sparse_budget_tokens": budget}
llm = LLM(None, **kw)
count = lambda text: len(llm.engine.encode(text))
task = os.environ.get("TASK", "code")
idx = [int(x) for x in os.environ.get("IDX", "0,1,2,3,4").split(",")]
samples = make_samples(task, length, int(os.environ.get("N", max(idx) + 1)), 0, count)
samples = [samples[i] for i in idx]
t0 = time.time()
outs = llm.generate([s.prompt for s in samples], SamplingParams(temperature=0.0, max_tokens=TASKS[task][1]))
sc = [score(o.text, s.answers) for s, o in zip(samples, outs)]
print(json.dumps({"cent": MODE, "budget": budget, "idx": idx, "scores": sc,
                  "outs": [o.text[:50] for o in outs], "s": round(time.time() - t0, 1)}), flush=True)

"""Dev only: NIAH at 2K with alternative union policies of the sparse selection (CPU).
env: POLICY rank|mass|raw, IDX comma list (default all 20), BUDGET tokens (256)."""
import json, os, sys, time
import torch
import kvspill.kv.cold_sparse as cs
from kvspill.kv.sparse_select import select_from_keys as rank_select
from kvspill.eval.runner import hot_kv_kwargs
from kvspill.eval.tasks import TASKS, make_samples, score
from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams

POLICY = os.environ.get("POLICY", "rank")
SCALE = 1 / 8.0  # SmolLM2 head_dim 64


def scores_of(keys):
    hi = (keys >> 32).to(torch.int32)
    bits = torch.where(hi < 0, hi ^ 0x7FFFFFFF, hi)
    s = bits.view(torch.float32).clone()
    s[hi == -(2**31)] = float("-inf")
    return s


def policy_select(keys, budget, positions=None):
    H, n = keys.shape
    if budget >= n or POLICY == "rank":
        return rank_select(keys, budget, positions)
    s = scores_of(keys) * SCALE
    if POLICY == "mass":
        pri = (s - torch.logsumexp(s, dim=1, keepdim=True)).amax(0)
    elif POLICY == "raw":
        pri = s.amax(0)
    elif POLICY == "sum":
        pri = torch.logsumexp(s - torch.logsumexp(s, dim=1, keepdim=True), dim=0)
    order = torch.argsort(-pri, stable=True)[:budget]
    return order.sort().values


cs.select_from_keys = policy_select
SCORE = os.environ.get("SCORE", "quest")
_orig_keys = cs.SparseColdStep._keys


def exact_keys(self, seq, layer_idx, q_row):
    """Oracle scores: per block and kv head, max (exactmax) or logsumexp (exactlse) of q.k over
    the block's keys and the head's query group."""
    if SCORE == "quest":
        return _orig_keys(self, seq, layer_idx, q_row)
    from kvspill.kernels.sparse_kernels import ranking_keys
    from kvspill.types import TIER_CPU
    kv = self.storage.tier_layer(TIER_CPU, layer_idx).index_select(0, seq.ids)  # [b, 2, bs, kvh, D]
    k = kv[:, 0].float()  # [b, bs, kvh, D]
    b, bs, kvh, D = k.shape
    qg = q_row.float().view(kvh, -1, D)  # [kvh, g, D]
    logits = torch.einsum("btkd,kgd->kbgt", k, qg)  # [kvh, b, g, bs]
    if SCORE == "exactmax":
        sc = logits.amax(dim=(2, 3))
    elif SCORE == "mid":
        summ = self._summary(seq, layer_idx).float()  # [b, 2, kvh, D]
        mid = (summ[:, 0] + summ[:, 1]) / 2
        sc = torch.einsum("bkd,kgd->kbg", mid, qg).amax(2)
    elif SCORE.startswith("l2"):
        alpha = float(SCORE[2:] or 1)
        summ = self._summary(seq, layer_idx).float()  # [b, 2, kvh, D]
        c = (summ[:, 0] + summ[:, 1]) / 2
        r = (summ[:, 1] - summ[:, 0]) / 2
        sc = (torch.einsum("bkd,kgd->kbg", c, qg) + alpha * torch.einsum("bkd,kgd->kbg", r * r, qg * qg).sqrt()).amax(2)
    else:  # exactlse over the group mean
        sc = torch.logsumexp(logits * SCALE, dim=3).amax(2) / SCALE
    return ranking_keys(sc)


cs.SparseColdStep._keys = exact_keys
budget = int(os.environ.get("BUDGET", 256))
length = int(os.environ.get("LEN", 2048))
kw = {"max_model_len": length, "device": "cpu", "dtype": "float32", **hot_kv_kwargs(256, length)}
if budget:
    kw.update(cold_attention="sparse", sparse_budget_tokens=budget)
else:
    kw.update(cold_attention="stream")
llm = LLM(None, **kw)
count = lambda text: len(llm.engine.encode(text))
task = os.environ.get("TASK", "niah_multikey")
samples = make_samples(task, length, 20, 0, count)
idx = [int(x) for x in os.environ.get("IDX", ",".join(map(str, range(20)))).split(",")]
samples = [samples[i] for i in idx]
t0 = time.time()
outs = llm.generate([s.prompt for s in samples], SamplingParams(temperature=0.0, max_tokens=TASKS[task][1]))
sc = [score(o.text, s.answers) for s, o in zip(samples, outs)]
print(json.dumps({"policy": POLICY, "budget": budget, "idx": idx, "scores": sc, "mean": 100 * sum(sc) / len(sc),
                  "outs": [o.text[:40] for o in outs], "s": round(time.time() - t0, 1)}), flush=True)

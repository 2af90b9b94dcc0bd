"""Dev only: sparse decode on CUDA with SmolLM2's geometry (9 heads, 3 kv heads, head_dim 64),
random weights. usage: sparse_repro.py MODE [n_prompts] [len] (MODE: default|eager|nocache|both)"""
import sys, traceback
from pathlib import Path
import torch
sys.path.insert(0, ".")
from transformers import LlamaConfig
from tests.conftest import _build_tiny
from kvspill.eval.runner import hot_kv_kwargs
from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams

mode = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 3
length = int(sys.argv[3]) if len(sys.argv) > 3 else 2048
path = Path("/tmp/smolgeo")
if not (path / "config.json").exists():
    cfg = LlamaConfig(vocab_size=256, hidden_size=576, intermediate_size=1536, num_attention_heads=9,
                      num_key_value_heads=3, num_hidden_layers=4, max_position_embeddings=8192,
                      initializer_range=0.05, bos_token_id=1, eos_token_id=2, tie_word_embeddings=True,
                      rope_theta=100000.0)
    _build_tiny(path, cfg)
kw = dict(device="cuda", dtype="float32", max_model_len=length, cold_attention="sparse",
          sparse_budget_tokens=length // 8, **hot_kv_kwargs(256, length))
if mode in ("eager", "both"):
    kw["enforce_eager"] = True
if mode in ("nocache", "both"):
    kw["sparse_cache_seqs"] = 0
import json
for item in sys.argv[4:]:
    k, v = item.split("=", 1)
    kw[k] = json.loads(v)
print(kw, flush=True)
from kvspill.runner import sparse_graphs as sgm
SG = {}
_fill = sgm.SparseDecodeGraphs._fill_cold
def _fill_cold(self, ids, logical, row):
    SG["g"] = self; SG["n"] = len(ids); SG["row"] = row
    return _fill(self, ids, logical, row)
sgm.SparseDecodeGraphs._fill_cold = _fill_cold
_replay = torch.cuda.CUDAGraph.replay
def replay(graph):
    g = SG.get("g")
    if g is not None:
        torch.cuda.synchronize()
        d = g.decode
        ids = d.input_ids[:4].tolist()
        i64 = g.i64[:, :SG["n"]]
        bad = [x for x in ids if not 0 <= x < 256]
        info = dict(input_ids=ids, pos=d.positions[:2].tolist(), slot=d.slot_mapping[:2].tolist(), row=int(g.i64[2, 1]), n=int(g.i64[2, 0]), max_id=int(i64[0].max()), max_logical=int(i64[1].max()),
                    slot_of_shape=tuple(g.cache.slot_of.shape), cpu_blocks=g.storage.tier_layer(1, 0).shape[0])
        if bad or info["row"] != 0 or info["n"] != SG["n"] or info["max_id"] >= info["cpu_blocks"] or info["max_logical"] >= info["slot_of_shape"][-1]:
            print("BAD before replay", info, flush=True)
        SG["count"] = SG.get("count", 0) + 1
        if SG["count"] <= 2:
            print("replay", info, flush=True)
    return _replay(graph)
torch.cuda.CUDAGraph.replay = replay
import os
if os.environ.get("EAGER_GRAPH"):  # "replays" run the captured function eagerly: the failing op shows
    from kvspill.runner import cuda_graphs as cgm
    def capture_one(self, b, cold=None):
        out = self.run_model(b, cold)
        class Fake:
            def replay(s):
                o2 = self.run_model(b, cold)
                out[0].copy_(o2[0]); out[1].copy_(o2[1])
            def reset(s):
                pass
        return Fake(), out
    cgm.DecodeGraphs.capture_one = capture_one
    torch.cuda.CUDAGraph.replay = _replay
llm = LLM(str(path), **kw)
g = torch.Generator().manual_seed(0)
prompts = [torch.randint(3, 256, (length - 48,), generator=g).tolist() for _ in range(n)]
try:
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=40, ignore_eos=True))
    print(mode, "ok", [len(o.token_ids) for o in outs])
except Exception as e:
    cause = e.__cause__ or e
    print(mode, "FAILED", type(e).__name__)
    traceback.print_exception(cause)
    sys.stdout.flush(); sys.stderr.flush()
    import os; os._exit(3)

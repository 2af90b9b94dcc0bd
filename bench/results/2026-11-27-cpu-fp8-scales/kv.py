import sys, torch
import kvspill.bench.kv_quality as q
which = sys.argv[1]
cnt = {"i": 0}
orig_call = q.StoredKVAttention.__call__
def call(self, layer_idx, qq, k, v):
    if which in ("k", "both"): k = k.to(torch.float8_e4m3fn).float()
    if which in ("v", "both"): v = v.to(torch.float8_e4m3fn).float()
    return torch.nn.functional.scaled_dot_product_attention(qq.transpose(0,1)[None], k.transpose(0,1)[None], v.transpose(0,1)[None], is_causal=True, enable_gqa=True)[0].transpose(0,1)
q.StoredKVAttention.__call__ = lambda self, l, qq, k, v: call(self, l, qq, k, v) if self.kv_dtype is not None else orig_call(self, l, qq, k, v)
q.main(["--kv-cache-dtype", "fp8", "--tokens", "2048", "--greedy-tokens", "0", "--out", f"/tmp/fp8x/only_{which}.json"])

"""Evaluation only: K as the engine's int8 (Hadamard basis, per-token-head scale), V as fp8 e4m3
(the engine's fp8 conversion); the kv_quality harness otherwise unchanged."""
import sys, torch
import kvspill.bench.kv_quality as q
vfmt = sys.argv[1] if len(sys.argv) > 1 else "fp8"
orig_call = q.StoredKVAttention.__call__
def call(self, l, qq, k, v):
    if self.kv_dtype is None or l not in self.quantized_layers:
        return orig_call(self, l, qq, k, v)
    k = q.stored_and_read(k, torch.int8)
    v = q.stored_and_read(v, torch.float8_e4m3fn if vfmt == "fp8" else torch.int8)
    o = torch.nn.functional.scaled_dot_product_attention(qq.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None], is_causal=True, enable_gqa=True)
    return o[0].transpose(0, 1)
q.StoredKVAttention.__call__ = call
q.main(["--kv-cache-dtype", "fp8", "--tokens", "2048", "--greedy-tokens", "0", "--out", f"/tmp/fp8x/mixed_int8k_{vfmt}v.json"])

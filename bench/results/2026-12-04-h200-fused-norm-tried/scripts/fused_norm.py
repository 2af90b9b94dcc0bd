"""Prototype (issue 54): RMSNorm folded into the one-token int16-x GEMVs that follow it (qkv,
gate_up: `gguf_gemv.quant_matmul_gemv_normed`), the residual add into the o / down GEMVs' epilogue
(the residual as their bias). Patches LlamaModel.forward for one-token GPU decode of a Llama whose
linears are all Q4_K / Q6_K QuantLinear (tp 1, no o / down bias); anything else runs the original.
Import it (FUSE=1 in prof_fused.py) before the engine is built."""
import torch
from kvspill.kernels.gguf_gemv import folds_norm, quant_matmul_gemv_normed
from kvspill.kernels.quant_linear import quant_linear
from kvspill.model import llama
from kvspill.model.quant import QuantLinear

_orig = llama.LlamaModel.forward
_checked: dict[int, bool] = {}


def _fusable(model, h) -> bool:
    if h.shape[0] != 1 or not h.is_cuda:
        return False
    key = id(model)
    if key not in _checked:
        ok = True
        for layer in model.layers:
            at, mlp = layer.self_attn, layer.mlp
            lins = (at.qkv_proj, at.o_proj, mlp.gate_up_proj, mlp.down_proj)
            ok &= all(isinstance(l, QuantLinear) for l in lins) and at.tp.size == 1 and mlp.tp.size == 1
            ok &= at.o_proj.bias is None and mlp.down_proj.bias is None
            ok &= ok and len(at.o_proj.parts) == 1 and len(mlp.down_proj.parts) == 1
            ok &= ok and all(folds_norm(h, p) for p in at.qkv_proj.parts + mlp.gate_up_proj.parts)
            ok &= ok and all(folds_norm(h, p) for p in at.o_proj.parts + mlp.down_proj.parts)
        _checked[key] = bool(ok)
        print("fused norm prototype:", "on" if ok else "off (falls back)", flush=True)
    return _checked[key]


def _normed(lin, h, norm):
    out = torch.empty((1, lin.out_features), dtype=h.dtype, device=h.device)
    widths = [p.out_features for p in lin.parts]
    for part, cols in zip(lin.parts, out.split(widths, dim=1)):
        quant_matmul_gemv_normed(h, part, norm.weight, norm.variance_epsilon, out=cols)
    if lin.bias is not None:
        out += lin.bias
    return out


def _plus_residual(lin, a, h):
    return quant_linear(a, lin.parts[0], bias=h.view(-1))


def forward(self, input_ids, positions, attention):
    h = self.embed_tokens(input_ids)
    if not _fusable(self, h):
        return _orig(self, input_ids, positions, attention)
    rotary = self.rotary_emb
    for layer in self.layers:
        at = layer.self_attn
        q, k, v = _normed(at.qkv_proj, h, layer.input_layernorm).split([at.q_size, at.kv_size, at.kv_size], dim=-1)
        q = q.view(1, at.num_heads, at.head_dim)
        k = k.view(1, at.num_kv_heads, at.head_dim)
        v = v.view(1, at.num_kv_heads, at.head_dim)
        if at.q_norm is not None and at.k_norm is not None:
            q, k = at.q_norm(q), at.k_norm(k)
        if getattr(attention, "fuses_rope", False):
            out = attention(at.layer_idx, q, k, v, rope=(positions, rotary.cos_sin_cache))
        else:
            q, k = rotary(positions, q, k)
            out = attention(at.layer_idx, q, k, v)
        h = _plus_residual(at.o_proj, out.reshape(1, at.q_size), h)
        gu = _normed(layer.mlp.gate_up_proj, h, layer.post_attention_layernorm)
        h = _plus_residual(layer.mlp.down_proj, layer.mlp.act_fn(gu), h)
    return self.norm(h)


llama.LlamaModel.forward = forward

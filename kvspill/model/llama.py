"""Llama family: Llama 2 / 3 / 3.1 / 3.2, SmolLM2, Mistral (without sliding window).

Also the shared blocks for Qwen2 and Qwen3, which differ only in biases and q/k norm: they
subclass `LlamaForCausalLM` and override `attention_spec`.

Invariants:
- Parameter names are HF's (`model.layers.N.self_attn.o_proj.weight`, ...) except the fused
  `qkv_proj` ([q; k; v] rows) and `gate_up_proj` ([gate; up] rows), filled at load.
- Tokens are flattened across sequences: no batch dim, no padding, no mask; the injected
  `AttentionFn` owns causality and the KV cache.
- With tied embeddings `lm_head` is `embed_tokens` (one tensor); a checkpoint's lm_head is skipped.
- Tensor parallelism (`tp`, model/parallel.py): each rank builds its own shard's shapes and
  `load_weights` slices every full HF tensor as it arrives; the all-reduces after o_proj and
  down_proj and the vocab-parallel embedding/lm_head are the only cross-rank steps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, cast

import torch
from torch import Tensor, nn
from transformers import PretrainedConfig

from kvspill.env import fused_decode_on, gated_words_on, norm_handoff_on
from kvspill.errors import UnsupportedModelError
from kvspill.kernels.fp8_gemv import GemvFusion, handed_over
from kvspill.kernels.norm_handoff import NormHandoff
from kvspill.model.base import AttentionFn, copy_param
from kvspill.model.layers import (
    DenseLinear,
    RMSNorm,
    RotaryEmbedding,
    SiluAndMul,
    cpu_widens,
    dense_linear,
    rope_parameters,
)
from kvspill.model.parallel import SINGLE, TensorParallel, VocabParallelEmbedding, check_splits, shard_weight

# HF name piece -> (fused parameter, shard index). Shard order = row order in the fused weight.
_STACKED = {
    ".q_proj.": (".qkv_proj.", 0),
    ".k_proj.": (".qkv_proj.", 1),
    ".v_proj.": (".qkv_proj.", 2),
    ".gate_proj.": (".gate_up_proj.", 0),
    ".up_proj.": (".gate_up_proj.", 1),
}
# Each decoder layer's projection (under `model.layers.N.`) -> its HF shards in row order: what a
# quantized format replaces (model/quant.py, model/fp8.py, model/int4_checkpoints.py).
PROJECTION_SHARDS = {
    "self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "self_attn.o_proj": ("self_attn.o_proj",),
    "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj"),
    "mlp.down_proj": ("mlp.down_proj",),
}


@dataclass(frozen=True)
class AttentionSpec:
    """How a family's attention differs from Llama's."""

    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: bool = False  # per-head RMSNorm of q and k before RoPE (Qwen3)


def head_dim_of(config: PretrainedConfig) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


class LlamaAttention(nn.Module):
    """Attention over this rank's heads (all of them with one rank); o_proj's partial sums meet in
    one all-reduce."""

    def __init__(
        self,
        config: PretrainedConfig,
        layer_idx: int,
        spec: AttentionSpec,
        dtype: torch.dtype | None,
        tp: TensorParallel = SINGLE,
    ) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.tp = tp
        self.num_heads = tp.split(config.num_attention_heads, "attention heads")
        self.num_kv_heads = tp.split(config.num_key_value_heads, "KV heads")
        self.head_dim = head_dim_of(config)
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        hidden = config.hidden_size
        self.qkv_proj = DenseLinear(hidden, self.q_size + 2 * self.kv_size, bias=spec.qkv_bias, dtype=dtype)
        self.o_proj = DenseLinear(self.q_size, hidden, bias=spec.o_bias, dtype=dtype)
        self.q_norm: RMSNorm | None = None
        self.k_norm: RMSNorm | None = None
        if spec.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps, dtype=dtype)
            self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps, dtype=dtype)

    def forward(
        self, positions: Tensor, x: Tensor, rotary: RotaryEmbedding, attention: AttentionFn
    ) -> Tensor:
        # x: [num_tokens, hidden_size]
        out = self.attend(positions, self.qkv_proj(x), rotary, attention)
        return self.tp.all_reduce(self.o_proj(out))

    def attend(
        self, positions: Tensor, qkv: Tensor, rotary: RotaryEmbedding, attention: AttentionFn
    ) -> Tensor:
        """qkv [num_tokens, q_size + 2 * kv_size] -> attention's output [num_tokens, q_size]."""
        n = qkv.shape[0]
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(n, self.num_heads, self.head_dim)  # [num_tokens, num_heads, head_dim]
        k = k.view(n, self.num_kv_heads, self.head_dim)  # [num_tokens, num_kv_heads, head_dim]
        v = v.view(n, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if getattr(attention, "fuses_rope", False):  # one kernel rotates q, k and stores k, v
            out = attention(self.layer_idx, q, k, v, rope=(positions, rotary.cos_sin_cache))
        else:
            q, k = rotary(positions, q, k)
            out = attention(self.layer_idx, q, k, v)  # [num_tokens, num_heads, head_dim]
        return out.reshape(n, self.q_size)


class LlamaMLP(nn.Module):
    def __init__(
        self, config: PretrainedConfig, dtype: torch.dtype | None, tp: TensorParallel = SINGLE
    ) -> None:
        super().__init__()
        bias = bool(getattr(config, "mlp_bias", False))
        self.tp = tp
        inter = tp.split(config.intermediate_size, "the MLP's intermediate size")
        self.gate_up_proj = DenseLinear(config.hidden_size, 2 * inter, bias=bias, dtype=dtype)
        self.down_proj = DenseLinear(inter, config.hidden_size, bias=bias, dtype=dtype)
        self.act_fn = SiluAndMul()

    def forward(self, x: Tensor) -> Tensor:
        # x: [num_tokens, hidden_size] -> [num_tokens, 2 * intermediate] -> [num_tokens, hidden_size]
        gate_up = self.gate_up_proj(x)
        down_gated = getattr(self.down_proj, "forward_gated", None)  # quantized (model/quant.py)
        if down_gated is not None and gate_up.is_cuda and gated_words_on():
            return self.tp.all_reduce(down_gated(gate_up))
        return self.tp.all_reduce(self.down_proj(self.act_fn(gate_up)))


class LlamaDecoderLayer(nn.Module):
    def __init__(
        self,
        config: PretrainedConfig,
        layer_idx: int,
        spec: AttentionSpec,
        dtype: torch.dtype | None,
        tp: TensorParallel = SINGLE,
    ) -> None:
        super().__init__()
        self.self_attn = LlamaAttention(config, layer_idx, spec, dtype, tp)
        self.mlp = LlamaMLP(config, dtype, tp)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, dtype=dtype)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, dtype=dtype)

    def projections(self) -> tuple[nn.Module, ...]:
        return (self.self_attn.qkv_proj, self.self_attn.o_proj, self.mlp.gate_up_proj, self.mlp.down_proj)

    def forward(
        self,
        positions: Tensor,
        x: Tensor,
        residual: Tensor | None,
        rotary: RotaryEmbedding,
        attention: AttentionFn,
        fused: bool = False,
        handoff: bool = False,
        handed: NormHandoff | None = None,
        hand_to: NormHandoff | None = None,
    ) -> tuple[Tensor, Tensor]:
        # x, residual: [num_tokens, hidden_size]; the residual add is fused into the next norm.
        # fused (one token, LlamaModel.fuses_decode): x is the residual stream itself, updated in
        # place and returned as both; handoff / handed / hand_to: `forward_fused`'s.
        if fused:
            self.forward_fused(positions, x, rotary, attention, handoff, handed, hand_to)
            return x, x
        if residual is None:
            residual = x
            x = self.input_layernorm(x)
        else:
            x, residual = self.input_layernorm(x, residual)
        x = self.self_attn(positions, x, rotary, attention)
        x, residual = self.post_attention_layernorm(x, residual)
        return self.mlp(x), residual

    def forward_fused(
        self,
        positions: Tensor,
        h: Tensor,
        rotary: RotaryEmbedding,
        attention: AttentionFn,
        handoff: bool = False,
        handed: NormHandoff | None = None,
        hand_to: NormHandoff | None = None,
    ) -> None:
        """One token, four GEMVs: each norm folded into the projection after it, the residual adds
        into the projection before them, the SiLU into the down projection (kernels/fp8_gemv.GemvFusion).
        h [1, hidden_size] is the residual stream, updated in place. With `handoff`
        (env.norm_handoff_on) the norms after the residual adds are handed from o and down to the
        GEMVs after them (NormHandoff): `handed` is this layer's input norm, filled by the layer
        before (None: it is folded into qkv), `hand_to` the next layer's, which down fills (None:
        the last layer)."""
        attn = self.self_attn
        qkv_proj, o_proj, gate_up_proj, down_proj = (cast(FusedProjection, p) for p in self.projections())
        if handed is not None:
            qkv = qkv_proj.forward_fused(*handed_over(handed))
        else:
            qkv = qkv_proj.forward_fused(h, _norm_fusion(self.input_layernorm))
        attended = attn.attend(positions, qkv, rotary, attention)
        if not handoff:
            o_proj.forward_fused(attended, GemvFusion(residual=h))
            gate_up = gate_up_proj.forward_fused(h, _norm_fusion(self.post_attention_layernorm))
            down_proj.forward_fused(gate_up, GemvFusion(gated=True, residual=h))
            return
        post = handoff_of(self.post_attention_layernorm)
        o_proj.forward_fused(attended, GemvFusion(residual=h, handoff=post))
        gate_up = gate_up_proj.forward_fused(*handed_over(post))
        down_proj.forward_fused(gate_up, GemvFusion(gated=True, residual=h, handoff=hand_to))


class FusedProjection(Protocol):
    """A projection that takes one decode token with a GemvFusion (model/fp8.Fp8Linear)."""

    def fuses_one_token(self, dtype: torch.dtype) -> bool: ...

    def forward_fused(self, x: Tensor, fusion: GemvFusion) -> Tensor: ...


def _norm_fusion(norm: RMSNorm) -> GemvFusion:
    return GemvFusion(norm_weight=norm.weight, eps=norm.variance_epsilon)


def handoff_of(norm: RMSNorm) -> NormHandoff:
    """An empty handoff of `norm`, for the GEMV before it to fill."""
    return NormHandoff(norm.weight, norm.variance_epsilon)


class LlamaModel(nn.Module):
    def __init__(
        self,
        config: PretrainedConfig,
        spec: AttentionSpec,
        max_positions: int,
        dtype: torch.dtype | None,
        tp: TensorParallel = SINGLE,
    ) -> None:
        super().__init__()
        # nn.Embedding, model/quant.py's QuantEmbedding when a GGUF stays quantized, or split
        # over the ranks (model/parallel.py). Given storage, nn.Embedding skips its normal_() init:
        # loading overwrites it, and on the meta device normal_ imports torch._dynamo (2-4 s of a
        # CPU start).
        self.embed_tokens: nn.Module = (
            nn.Embedding(
                config.vocab_size,
                config.hidden_size,
                _weight=torch.empty(config.vocab_size, config.hidden_size, dtype=dtype),
            )
            if tp.size == 1
            else VocabParallelEmbedding(config.vocab_size, config.hidden_size, tp, dtype)
        )
        self.layers = nn.ModuleList(
            LlamaDecoderLayer(config, i, spec, dtype, tp) for i in range(config.num_hidden_layers)
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, dtype=dtype)
        self.rotary_emb = RotaryEmbedding(config, head_dim_of(config), max_positions)
        self.tp = tp
        self._fusable: dict[torch.dtype, bool] = {}  # per x dtype, found at the first step

    def fuses_decode(self, x: Tensor) -> bool:
        """Whether this step of hidden states x takes LlamaDecoderLayer's fused form: one token on
        CUDA, one rank, `layers_fuse`, KVSPILL_FUSED_DECODE on (read last: a dense model's eager
        one-token steps stop at the cached layer check)."""
        one_token = x.is_cuda and x.shape[0] == 1 and x.is_contiguous() and self.tp.size == 1
        return one_token and self.layers_fuse(x.dtype) and fused_decode_on()

    def layers_fuse(self, dtype: torch.dtype) -> bool:
        """Whether every layer's four projections take one fused token of x in `dtype`
        (`fuses_one_token`: fp8 weights; dense and GGUF ones in the norm handoff's form only, see
        env.norm_handoff_on). Found once per dtype, at its first one-token step, and kept."""
        if dtype not in self._fusable:
            self._fusable[dtype] = all(
                isinstance(layer, LlamaDecoderLayer)
                and all(getattr(p, "fuses_one_token", lambda _d: False)(dtype) for p in layer.projections())
                for layer in self.layers
            )
        return self._fusable[dtype]

    def forward(self, input_ids: Tensor, positions: Tensor, attention: AttentionFn) -> Tensor:
        x = self.embed_tokens(input_ids)  # [num_tokens, hidden_size]
        if cpu_widens(x):  # a CPU prefill over fp16 weights: activations in fp32 (layers.CPU_WIDE_MIN_TOKENS)
            x = x.float()
        if self.fuses_decode(x):
            handoff = norm_handoff_on()
            handed: NormHandoff | None = None
            for i, layer in enumerate(self.layers):
                after = cast(LlamaDecoderLayer, self.layers[i + 1]) if i + 1 < len(self.layers) else None
                hand_to = handoff_of(after.input_layernorm) if handoff and after is not None else None
                layer(
                    positions,
                    x,
                    None,
                    self.rotary_emb,
                    attention,
                    fused=True,
                    handoff=handoff,
                    handed=handed,
                    hand_to=hand_to,
                )
                handed = hand_to
            return self.norm(x)
        residual: Tensor | None = None
        for layer in self.layers:
            x, residual = layer(positions, x, residual, self.rotary_emb, attention)
        if residual is None:  # zero layers
            return self.norm(x)
        x, _ = self.norm(x, residual)
        return x


class LlamaForCausalLM(nn.Module):
    """Build on `meta` (then `to_empty`, `init_buffers`, `load_weights`) or on the target device.

    Device comes from the caller's `torch.device(...)` context; dtype is passed explicitly so
    that the RoPE table stays float32.
    """

    def __init__(
        self,
        config: PretrainedConfig,
        *,
        max_model_len: int | None = None,
        dtype: torch.dtype | None = None,
        tp: TensorParallel = SINGLE,
    ) -> None:
        super().__init__()
        self.check_supported(config, max_model_len)
        check_splits(config, tp.size)
        self.config = config
        self.tp = tp
        head_dim = head_dim_of(config)
        # Row sizes of the fused weights (this rank's), in shard order: qkv_proj [q | k | v],
        # gate_up_proj [gate | up].
        n = tp.size
        self.qkv_sizes = [config.num_attention_heads // n * head_dim] + [
            config.num_key_value_heads // n * head_dim
        ] * 2
        self.gate_up_sizes = [config.intermediate_size // n] * 2
        max_positions = max_model_len or config.max_position_embeddings
        self.model = LlamaModel(config, self.attention_spec(config), max_positions, dtype, tp)
        self.tie_word_embeddings = bool(getattr(config, "tie_word_embeddings", False))
        if self.tie_word_embeddings:
            self.lm_head: nn.Module = self.model.embed_tokens  # one tensor, one name
        else:
            rows = tp.vocab_shard(config.vocab_size) if n > 1 else config.vocab_size
            self.lm_head = DenseLinear(config.hidden_size, rows, bias=False, dtype=dtype)

    @classmethod
    def attention_spec(cls, config: PretrainedConfig) -> AttentionSpec:
        bias = bool(getattr(config, "attention_bias", False))
        return AttentionSpec(qkv_bias=bias, o_bias=bias)

    @classmethod
    def check_supported(cls, config: PretrainedConfig, max_model_len: int | None) -> None:
        """Raise UnsupportedModelError for features this implementation does not compute."""
        act = getattr(config, "hidden_act", "silu")
        if act != "silu":
            raise UnsupportedModelError(f"hidden_act {act!r} is not supported (only 'silu').")
        if rope_parameters(config).get("partial_rotary_factor", 1.0) != 1.0:
            raise UnsupportedModelError("partial_rotary_factor != 1 is not supported.")
        window = getattr(config, "sliding_window", None)
        if window is None or not getattr(config, "use_sliding_window", True):
            return
        layer_types = getattr(config, "layer_types", None)
        if layer_types is not None and "sliding_attention" not in layer_types:
            return
        max_len = max_model_len or config.max_position_embeddings
        if window < max_len:
            raise UnsupportedModelError(
                f"This model uses sliding-window attention (window {window} tokens), which kvspill does "
                f"not implement. Pass --max-model-len {window} or less to run it with full attention."
            )

    def forward(self, input_ids: Tensor, positions: Tensor, attention: AttentionFn) -> Tensor:
        """input_ids, positions: [num_tokens] int64 -> hidden: [num_tokens, hidden_size]."""
        return self.model(input_ids, positions, attention)

    def compute_logits(self, hidden: Tensor, widen: bool = True) -> Tensor:
        """hidden: [num_tokens, hidden_size] -> [num_tokens, vocab_size] float32; widen=False: in
        the lm_head's output dtype (float32 under tensor parallelism, which gathers them so)."""
        project = getattr(self.lm_head, "project", None)  # quantized lm_head (model/quant.py)
        if project is not None:
            logits = project(hidden)
        else:
            weight = self.lm_head.weight
            assert isinstance(weight, Tensor)
            logits = dense_linear(hidden, weight)
        if self.tp.size == 1:
            return logits.float() if widen else logits
        logits = logits.float()
        # [num_tokens, vocab_shard] per rank -> [num_tokens, vocab_size] on every rank
        return self.tp.all_gather_last(logits)[:, : self.config.vocab_size]

    def init_buffers(self) -> None:
        self.model.rotary_emb.init_buffers()

    def load_weights(self, weights: Iterable[tuple[str, Tensor]]) -> set[str]:
        """Copy HF-named tensors in, one at a time, fusing q/k/v and gate/up.

        Returns the HF names loaded; compare with `expected_weight_names()` to find gaps.
        """
        params = dict(self.named_parameters())
        loaded: set[str] = set()
        for name, tensor in weights:
            if name.endswith("rotary_emb.inv_freq") or (
                name == "lm_head.weight" and self.tie_word_embeddings
            ):
                continue
            target, shard = name, -1
            for piece, (fused, index) in _STACKED.items():
                if piece in name:
                    target, shard = name.replace(piece, fused), index
                    break
            tensor = shard_weight(name, tensor, self.tp)  # the whole tensor with one rank
            param = params.get(target)
            if param is None:
                raise UnsupportedModelError(
                    f"The checkpoint has a tensor {name!r} that {type(self).__name__} does not use: "
                    "its architecture differs from what config.json says."
                )
            dest: Tensor = param
            if shard >= 0:
                sizes = self.qkv_sizes if ".qkv_proj." in target else self.gate_up_sizes
                dest = param.narrow(0, sum(sizes[:shard]), sizes[shard])  # rows of this shard
            copy_param(dest, tensor, name)
            loaded.add(name)
        return loaded

    def expected_weight_names(self) -> set[str]:
        """HF names a complete checkpoint provides for this model (q/k/v and gate/up unfused)."""
        names: set[str] = set()
        for name, _ in self.named_parameters():
            pieces = [piece for piece, (fused, _i) in _STACKED.items() if fused in name]
            if not pieces:
                names.add(name)
            for piece in pieces:
                names.add(name.replace(_STACKED[piece][0], piece))
        return names


# (layer index, projection name, its dense module, row sizes of its shards) -> the module to put
# in its place, or None to keep the dense one.
ProjectionFactory = Callable[[int, str, nn.Linear, list[int]], "nn.Module | None"]


def replace_projections(model: LlamaForCausalLM, make: ProjectionFactory) -> int:
    """Swap each decoder layer's dense projections (PROJECTION_SHARDS) for what `make` returns; on
    `meta`, before `to_empty`, so the dense weights are never allocated. Returns how many."""
    count = 0
    for i, layer in enumerate(model.model.layers):
        for name in PROJECTION_SHARDS:
            parent_name, _, attr = name.rpartition(".")
            parent = layer.get_submodule(parent_name)
            dense = getattr(parent, attr)
            if not isinstance(dense, nn.Linear):
                continue  # already replaced by another format
            sizes = {"qkv_proj": model.qkv_sizes, "gate_up_proj": model.gate_up_sizes}.get(attr)
            replacement = make(i, name, dense, list(sizes) if sizes is not None else [dense.out_features])
            if replacement is not None:
                setattr(parent, attr, replacement)
                count += 1
    return count

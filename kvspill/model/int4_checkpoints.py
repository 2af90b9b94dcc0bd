"""int4 weight-only checkpoints (AWQ, GPTQ) run as GGUF Q4_1 blocks through kvspill's int4 kernels.

An asymmetric int4 group, w = (q - z) * s with one fp16 scale s and one zero z per `group_size`
input channels of an output row, is GGUF Q4_1's w = d * q + m per 32-block with d = s and
m = -(s * z) (the same d and m for every 32-block of a group). So the packed tensors of each
linear are converted once, at load, per output row, into Q4_1 blocks (`to_q4_1`: a
`QuantizedWeight` of qtype "Q4_1", uint8 [out, in / 32 * 20]) and handed to `QuantLinear`: the
Triton GEMV / dequant kernels (and the CPU reference) run them unchanged. Group sizes must be
multiples of 32 (128 is the usual); 5 bits a weight on the device (AWQ's own layout: ~4.25).

Checkpoint formats, per HF linear `<prefix>` (e.g. `model.layers.0.self_attn.q_proj`), with
in = in_features, out = out_features, G = in / group_size (sources below):
- AWQ, `quant_method: "awq"`, `version: "gemm"`, `zero_point: true` (AutoAWQ's WQLinear_GEMM):
  `qweight` int32 [in, out / 8]: word c of row i holds columns 8c .. 8c + 7 of w.T, nibble k
  (bits 4k .. 4k + 3) being column 8c + AWQ_ORDER[k], AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7);
  `qzeros` int32 [G, out / 8] packed the same way (the zero itself, 0..15);
  `scales` fp16 [G, out]. w[o, i] = (q[o, i] - z[o, i // group]) * s[o, i // group].
- GPTQ, `quant_method: "gptq"`, `bits: 4`, `desc_act: false` (AutoGPTQ / GPTQModel / optimum):
  `qweight` int32 [in / 8, out]: word r of column o holds input rows 8r .. 8r + 7, nibble k
  (bits 4k) being row 8r + k; `qzeros` int32 [G, out / 8]: nibble k of word c is column
  8c + k (no reordering); `scales` fp16 [G, out]; `g_idx` int32 [in] (optional), the group of
  each input row: it must be the trivial i // group_size (act-order checkpoints, `desc_act:
  true`, permute it and are rejected). Zero offset: the classic format (`checkpoint_format`
  absent or "gptq", "v1") stores z - 1 (clamped at 0) and every GPTQ kernel (exllama, vLLM's
  gptq_gemm, Marlin's conversion) adds 1 back, so z = nibble + 1 (1..16; 8 for `sym: true`);
  `checkpoint_format: "gptq_v2"` (GPTQModel) stores z itself. `group_size: -1` (one group per
  row) is accepted where in_features is a multiple of 32.
- Anything else (bits != 4, group sizes not a multiple of 32, AWQ "gemv" / "marlin" /
  "exllama" versions, zero_point false, desc_act, GPTQModel `dynamic` overrides, marlin
  checkpoint formats, other quant methods) raises UnsupportedModelError naming what is supported.
Sources: AutoAWQ `awq/modules/linear/gemm.py` (WQLinear_GEMM.from_linear packing, order_map
[0, 2, 4, 6, 1, 3, 5, 7]); GPTQModel `nn_modules/qlinear/awq_gemm.py` (AWQ_ORDER /
AWQ_REVERSE_ORDER (0, 4, 1, 5, 2, 6, 3, 7)); vLLM `quantization/awq_triton.py` (the same reverse
order; dequant (q - z) * s in fp16); AutoGPTQ `nn_modules/qlinear/qlinear_cuda_old.py`
(pack: `zeros -= 1`, qweight along the input dim, qzeros along out); vLLM `quantization/gptq.py`
and its exllama kernel (zeros + 1 for v1; `checkpoint_format == "gptq_v2"` uses them as stored).

Precision: d = s exactly (an fp16 scale is an fp16 d); m = -(s * z) is computed in float32
(exact: an 11-bit mantissa times z <= 16) and rounded to fp16 once, so the dequantized weight
d * q + m differs from the exact (q - z) * s by at most |s * z| * 2**-11 (half an fp16 ulp of m;
2**-25 absolute if m is subnormal), plus float32 rounding of the sum (2**-24 relative): at most
16 * 2**-11 < 0.8% of one quantization step |s|. AWQ's own kernels compute fp16((q - z) * s),
whose rounding is |w| * 2**-11 <= 15 * 2**-11 * |s|: the two differ from the exact weight by
errors of the same size, far below the int4 step itself. Measured (tests/model/
test_int4_checkpoints.py): per weight, at most 0.65% of a step for ours vs 0.68% for fp16; on the
tiny Llama's logits, 2.2e-3 relative to the exact-int4 model for ours vs 0.9e-3 to 1.5e-3 for fp16
(m's rounding is shared by the 32..128 weights of a group, so it averages out less).

How a model loads (loader.load_model's steps):
1. `spec = parse_int4_config(config)`; on `meta`, `install_int4_modules(model, dtype, spec)`;
2. `to_empty(device)`, `init_buffers()`;
3. `load_weights_int4(model, safetensors_stream, spec, device)`; compare with
   `expected_weight_names_int4(model)`.
Embeddings, norms and the lm_head stay dense (AWQ and GPTQ checkpoints keep them in fp16).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from kvspill.errors import ModelNotFoundError, UnsupportedModelError
from kvspill.kernels.gguf_formats import QuantizedWeight, check_supported
from kvspill.model.llama import PROJECTION_SHARDS, LlamaForCausalLM, replace_projections
from kvspill.model.parallel import SINGLE, TensorParallel, is_row_parallel, shard_weight
from kvspill.model.quant import QuantLinear

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # nibble k of an AWQ word holds column AWQ_ORDER[k] of its 8
AWQ_REVERSE_ORDER = (0, 4, 1, 5, 2, 6, 3, 7)  # column j of the 8 is nibble AWQ_REVERSE_ORDER[j]
SUPPORTED_METHODS = ("awq", "gptq")
_SUPPORTED = (
    "4-bit AWQ (version gemm, zero_point true) and 4-bit GPTQ (desc_act false, checkpoint_format "
    "gptq or gptq_v2), with group_size a multiple of 32 (e.g. 128)"
)
_PACKED = ("qweight", "qzeros", "scales")  # a linear converts once all three are in


@dataclass(frozen=True)
class Int4Config:
    """A checkpoint's int4 scheme, from config.json's `quantization_config`."""

    method: Literal["awq", "gptq"]
    group_size: int  # input channels per (scale, zero); -1: one group per row (GPTQ)
    zero_offset: int  # added to the stored zeros: 1 for classic GPTQ, 0 for AWQ and gptq_v2
    modules_to_not_convert: tuple[str, ...] = ()  # HF module names (substrings) left dense

    def group_for(self, in_features: int) -> int:
        return in_features if self.group_size == -1 else self.group_size


def _unsupported(what: str) -> UnsupportedModelError:
    return UnsupportedModelError(
        f"This checkpoint's quantization_config has {what}, which kvspill cannot run. Supported: "
        f"{_SUPPORTED}. Use such a checkpoint, or the unquantized model (optionally with --quantization fp8)."
    )


def parse_int4_config(config: Any) -> Int4Config | None:
    """The int4 scheme of a transformers config (or a config.json dict); None without a
    `quantization_config`. Raises UnsupportedModelError for any other quantization."""
    quant = config.get("quantization_config") if isinstance(config, dict) else None
    if quant is None and not isinstance(config, dict):
        quant = getattr(config, "quantization_config", None)
    if quant is None:
        return None
    if not isinstance(quant, dict):  # a transformers QuantizationConfigMixin
        quant = quant.to_dict() if hasattr(quant, "to_dict") else dict(vars(quant))
    method = str(quant.get("quant_method", "")).lower()
    if method not in SUPPORTED_METHODS:
        raise _unsupported(f"quant_method {method or 'missing'!r}")
    bits = quant.get("bits", quant.get("w_bit"))
    if bits is None or int(bits) != 4:
        raise _unsupported(f"bits={bits}")
    group = quant.get("group_size", quant.get("q_group_size"))
    if group is None:
        raise _unsupported("no group_size")
    group = int(group)
    if not ((group > 0 and group % 32 == 0) or (group == -1 and method == "gptq")):
        raise _unsupported(f"group_size={group} (not a multiple of 32)")
    skip = tuple(str(m) for m in (quant.get("modules_to_not_convert") or ()))
    if method == "awq":
        version = str(quant.get("version", "gemm")).lower()
        if version != "gemm":
            raise _unsupported(f"AWQ version {version!r} (only 'gemm' packing is read)")
        if not quant.get("zero_point", True):
            raise _unsupported("AWQ zero_point=false")
        return Int4Config("awq", group, 0, skip)
    if quant.get("desc_act", False):
        raise _unsupported("desc_act=true (act-order: the input channels are permuted)")
    if quant.get("dynamic"):
        raise _unsupported("GPTQModel per-module `dynamic` overrides")
    if quant.get("is_marlin_format", False):
        raise _unsupported("is_marlin_format=true (Marlin-repacked weights)")
    fmt = str(quant.get("checkpoint_format", "gptq")).lower()
    if fmt not in ("gptq", "gptq_v1", "v1", "gptq_v2", "v2"):
        raise _unsupported(f"checkpoint_format {fmt!r}")
    return Int4Config("gptq", group, 0 if fmt in ("gptq_v2", "v2") else 1, skip)


# ---- unpacking: packed int32 words -> uint8 quants [out, in], zeros [out, G], scales [out, G] ----


def _nibbles(packed: Tensor) -> Tensor:
    """int32 [..., n] -> uint8 [..., n, 8]: nibble k (bits 4k .. 4k + 3) of each word at [..., k]."""
    out = torch.empty((*packed.shape, 8), dtype=torch.uint8, device=packed.device)
    for k in range(8):  # 8 passes over the packed words: no int32 temporary of the unpacked size
        out[..., k] = ((packed >> (4 * k)) & 0xF).to(torch.uint8)
    return out


def _check_packed(qweight: Tensor, qzeros: Tensor, scales: Tensor, packed_in: bool, group: int) -> int:
    """Shape checks shared by both formats; returns the group count G."""
    if qweight.dtype != torch.int32 or qzeros.dtype != torch.int32:
        raise ModelNotFoundError(
            f"int4 qweight / qzeros must be int32, got {qweight.dtype} / {qzeros.dtype}: not an AWQ/GPTQ checkpoint"
        )
    if qweight.dim() != 2 or qzeros.dim() != 2 or scales.dim() != 2:
        raise ModelNotFoundError(
            f"int4 tensors must be 2-D: qweight {tuple(qweight.shape)}, qzeros {tuple(qzeros.shape)}, "
            f"scales {tuple(scales.shape)}"
        )
    in_features = qweight.shape[0] * (8 if packed_in else 1)
    out_features = qweight.shape[1] * (1 if packed_in else 8)
    groups = scales.shape[0]
    expected_groups = 1 if group == -1 else in_features // group
    if (
        (group != -1 and in_features % group)
        or tuple(scales.shape) != (expected_groups, out_features)
        or tuple(qzeros.shape) != (expected_groups, out_features // 8)
    ):
        raise ModelNotFoundError(
            f"int4 tensors do not fit group_size {group}: qweight {tuple(qweight.shape)}, "
            f"qzeros {tuple(qzeros.shape)}, scales {tuple(scales.shape)}. The checkpoint does not match its "
            "config.json."
        )
    return groups


def unpack_awq(qweight: Tensor, qzeros: Tensor, scales: Tensor, group: int) -> tuple[Tensor, Tensor, Tensor]:
    """AWQ GEMM tensors -> (q uint8 [out, in], z uint8 [out, G], s fp16 [out, G]), on their device.

    qweight int32 [in, out / 8], qzeros int32 [G, out / 8], scales fp16 [G, out] (module docstring)."""
    groups = _check_packed(qweight, qzeros, scales, packed_in=False, group=group)
    reverse = torch.tensor(AWQ_REVERSE_ORDER, device=qweight.device)
    q = _nibbles(qweight).index_select(-1, reverse).reshape(qweight.shape[0], -1)  # [in, out]
    z = _nibbles(qzeros).index_select(-1, reverse).reshape(groups, -1)  # [G, out]
    return q.t().contiguous(), z.t().contiguous(), scales.to(torch.float16).t().contiguous()


def check_g_idx(g_idx: Tensor, group: int, name: str = "g_idx") -> None:
    """Raise UnsupportedModelError unless g_idx [in] is the trivial i // group (no act-order)."""
    trivial = torch.arange(g_idx.numel(), device=g_idx.device) // group
    if g_idx.dim() != 1 or not torch.equal(g_idx.to(trivial.dtype), trivial):
        raise UnsupportedModelError(
            f"{name} is not i // group_size: this GPTQ checkpoint was quantized with act-order (desc_act), "
            f"which kvspill does not support. Supported: {_SUPPORTED}."
        )


def unpack_gptq(
    qweight: Tensor,
    qzeros: Tensor,
    scales: Tensor,
    group: int,
    zero_offset: int = 1,
    g_idx: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """GPTQ tensors -> (q uint8 [out, in], z uint8 [out, G], s fp16 [out, G]), on their device.

    qweight int32 [in / 8, out], qzeros int32 [G, out / 8], scales fp16 [G, out]; `zero_offset`
    1 for the classic format (stored z - 1), 0 for gptq_v2; `group` -1: one group per row."""
    groups = _check_packed(qweight, qzeros, scales, packed_in=True, group=group)
    in_features = qweight.shape[0] * 8
    if g_idx is not None:
        check_g_idx(g_idx, in_features if group == -1 else group)
    q = _nibbles(qweight).transpose(1, 2).reshape(in_features, -1)  # [in / 8, out, 8] -> [in, out]
    z = _nibbles(qzeros).reshape(groups, -1) + zero_offset  # [G, out]: at most 15 + 1, fits uint8
    return q.t().contiguous(), z.t().contiguous(), scales.to(torch.float16).t().contiguous()


# ---- int4 groups -> Q4_1 blocks, and the float32 reference ----


def dequantize_int4(q: Tensor, z: Tensor, s: Tensor) -> Tensor:
    """Reference: (q - z) * s -> float32 [out, in] (exact: an integer <= 16 times an fp16 scale)."""
    group = q.shape[1] // z.shape[1]
    zz = z.float().repeat_interleave(group, dim=1)
    ss = s.float().repeat_interleave(group, dim=1)
    return (q.float() - zz) * ss


def to_q4_1(q: Tensor, z: Tensor, s: Tensor) -> QuantizedWeight:
    """(q uint8 [out, in] in 0..15, z [out, G], s fp16 [out, G]) -> Q4_1 blocks on q's device:
    d = s, m = fp16(-(s * z)) (float32 product, one rounding), the same for a group's 32-blocks."""
    out_features, in_features = q.shape
    groups = z.shape[1]
    assert tuple(z.shape) == tuple(s.shape) == (out_features, groups) and in_features % groups == 0
    group = in_features // groups
    if group % 32:
        raise UnsupportedModelError(f"int4 group of {group} input channels is not a multiple of 32")
    per_group = group // 32
    num_blocks = in_features // 32
    d = s.to(torch.float16)
    m = (-(d.float() * z.float())).to(torch.float16)
    if not torch.isfinite(m).all():
        raise UnsupportedModelError(
            "int4 scale * zero overflows fp16: this checkpoint cannot be held as Q4_1"
        )
    blocks = torch.empty((out_features, num_blocks, 20), dtype=torch.uint8, device=q.device)
    blocks[..., 0:2] = d.repeat_interleave(per_group, dim=1).unsqueeze(-1).view(torch.uint8)
    blocks[..., 2:4] = m.repeat_interleave(per_group, dim=1).unsqueeze(-1).view(torch.uint8)
    qb = q.reshape(out_features, num_blocks, 32)
    blocks[..., 4:20] = qb[..., :16] | (qb[..., 16:] << 4)  # byte j: weight j low, weight j + 16 high
    return QuantizedWeight(blocks.reshape(out_features, -1), "Q4_1", out_features, in_features)


# ---- the model: QuantLinear modules on meta, then the streamed checkpoint ----


def install_int4_modules(model: LlamaForCausalLM, dtype: torch.dtype, spec: Int4Config | None = None) -> int:
    """Replace every decoder layer's dense q/k/v/o and gate/up/down with `QuantLinear` (on `meta`,
    before `to_empty`), except modules matching `spec.modules_to_not_convert`. Returns how many."""
    skip = spec.modules_to_not_convert if spec is not None else ()

    def make(i: int, name: str, dense: nn.Linear, out_sizes: list[int]) -> nn.Module | None:
        names = [f"model.layers.{i}.{shard}" for shard in PROJECTION_SHARDS[name]]
        if any(pattern in n for pattern in skip for n in names):
            return None
        # The checkpoint's groups run over the whole input width; a rank's o/down holds a slice.
        full_in = dense.in_features * (model.tp.size if is_row_parallel(names[0] + ".") else 1)
        if spec is not None and (full_in % 32 or full_in % spec.group_for(full_in)):
            raise _unsupported(
                f"group_size={spec.group_size} for {names[0]} with {dense.in_features} input features"
            )
        return QuantLinear(dense.in_features, out_sizes, dense.bias is not None, dtype)

    return replace_projections(model, make)


def _routes(model: LlamaForCausalLM) -> dict[str, tuple[QuantLinear, int]]:
    """HF linear prefix (`model.layers.N.self_attn.q_proj`) -> (its QuantLinear, shard index)."""
    routes: dict[str, tuple[QuantLinear, int]] = {}
    for module_name, module in model.model.layers.named_modules(prefix="model.layers"):
        if not isinstance(module, QuantLinear):
            continue
        for fused, shards in PROJECTION_SHARDS.items():
            if module_name.endswith("." + fused):
                base = module_name[: -len(fused)]
                for index, shard in enumerate(shards):
                    routes[base + shard] = (module, index)
    return routes


def _convert(
    parts: dict[str, Tensor],
    spec: Int4Config,
    module: QuantLinear,
    index: int,
    prefix: str,
    device: torch.device,
    tp: TensorParallel = SINGLE,
) -> QuantizedWeight:
    """One HF linear's packed tensors -> this rank's Q4_1 shard on `device` (unpacked there).

    With tensor parallelism the whole linear is converted, then split like a GGUF's blocks: rows
    for q/k/v/gate/up, 32-column blocks for o/down. A Q4_1 block carries its own scale and
    minimum, so any block-aligned split holds exactly the values one rank would."""
    qweight, qzeros, scales = (parts[k].to(device) for k in _PACKED)
    row_parallel = is_row_parallel(prefix + ".")
    full_out = module.out_sizes[index] * (1 if row_parallel else tp.size)
    full_in = module.in_features * (tp.size if row_parallel else 1)
    group = spec.group_for(full_in)
    try:
        if spec.method == "awq":
            q, z, s = unpack_awq(qweight, qzeros, scales, group)
        else:
            q, z, s = unpack_gptq(qweight, qzeros, scales, group, spec.zero_offset)
    except ModelNotFoundError as e:
        raise ModelNotFoundError(f"{prefix}: {e}") from e
    if tuple(q.shape) != (full_out, full_in):
        raise ModelNotFoundError(
            f"{prefix} unpacks to shape {tuple(q.shape)} but the model expects {(full_out, full_in)}: the "
            "checkpoint does not match its config.json."
        )
    whole = to_q4_1(q, z, s)
    if tp.size == 1:
        return whole
    data = shard_weight(prefix + ".weight", whole.data, tp, ("Q4_1", check_supported("Q4_1").type_size))
    return QuantizedWeight(data.contiguous(), "Q4_1", module.out_sizes[index], module.in_features)


def load_weights_int4(
    model: LlamaForCausalLM, weights: Iterable[tuple[str, Tensor]], spec: Int4Config, device: torch.device
) -> set[str]:
    """Stream HF-named tensors in. The `<prefix>.qweight / .qzeros / .scales` of each quantized
    linear are buffered (in any order) until all three are in, converted to a Q4_1 shard on
    `device`, and set on their QuantLinear once all its fused shards are; GPTQ's `g_idx` is checked
    (act-order raises); everything else (embeddings, norms, lm_head, biases) goes to
    `model.load_weights`. Returns the HF names loaded, `<prefix>.weight` for the quantized linears."""
    routes = _routes(model)
    pending: dict[str, dict[str, Tensor]] = {}
    shards: dict[QuantLinear, dict[int, QuantizedWeight]] = {}
    quantized: set[str] = set()

    def dense() -> Iterator[tuple[str, Tensor]]:
        for name, tensor in weights:
            prefix, _, leaf = name.rpartition(".")
            route = routes.get(prefix)
            if leaf in (*_PACKED, "g_idx"):
                if route is None:
                    raise UnsupportedModelError(
                        f"The checkpoint has an int4 tensor {name!r} for a layer kvspill keeps dense (only the "
                        "decoder layers' q/k/v/o/gate/up/down projections run quantized)."
                    )
                module, index = route
                if leaf == "g_idx":
                    if spec.method == "gptq":
                        check_g_idx(tensor, spec.group_for(module.in_features), name)
                    continue
                parts = pending.setdefault(prefix, {})
                parts[leaf] = tensor
                if any(k not in parts for k in _PACKED):
                    continue
                del pending[prefix]
                by_index = shards.setdefault(module, {})
                by_index[index] = _convert(parts, spec, module, index, prefix, device, model.tp)
                quantized.add(prefix + ".weight")
                if len(by_index) == len(module.out_sizes):
                    module.set_weight([by_index[i] for i in range(len(module.out_sizes))])
                    del shards[module]
                continue
            if route is not None and leaf == "weight":
                raise UnsupportedModelError(
                    f"The checkpoint has a dense {name!r} where its quantization_config says int4: "
                    "config.json and the weights disagree."
                )
            if route is not None and leaf == "bias" and route[0].bias is None:
                if not tensor.any():  # classic GPTQ writes zero biases for bias-free layers
                    continue
                raise UnsupportedModelError(f"The checkpoint has a nonzero {name!r} the model does not use.")
            yield name, tensor

    loaded = model.load_weights(dense())
    if pending:
        prefix, parts = next(iter(pending.items()))
        raise ModelNotFoundError(
            f"The checkpoint has {sorted(parts)} of {prefix} but not {sorted(set(_PACKED) - set(parts))} "
            f"({len(pending)} int4 linears incomplete): the download is incomplete."
        )
    return loaded | quantized


def expected_weight_names_int4(model: LlamaForCausalLM) -> set[str]:
    """HF names a complete checkpoint provides, the quantized linears as `<prefix>.weight`
    (`model.expected_weight_names()` sees parameters only: biases yes, QuantLinear weights no)."""
    return model.expected_weight_names() | {prefix + ".weight" for prefix in _routes(model)}

"""What the weights take and how fast decode reads them, by format: dense, GGUF, fp8, int4 checkpoints.

`stored_weight_bytes` estimates every weight as the engine will hold it from the model's shapes
(or, for a GGUF kept quantized, the file's own tensor bytes); `weight_read_fraction` is the share
of HBM bandwidth decode reads them at, measured per format (the kernels, not the bytes, bound
the quantized ones today). No torch, no I/O.
"""

from __future__ import annotations

from kvspill.plan.spec import ModelSpec

# Bits per weight of llama.cpp's GGUF file types as its quantize tool reports them for Llama-3-8B
# (Q4_K_M and Q5_K_M mix types per tensor): what a quantized file of a model would take.
# The single types are exact (block bytes x 8 / block weights).
GGUF_BITS_PER_WEIGHT = {
    "q4_0": 4.5, "q4_1": 5.0, "q5_0": 5.5, "q5_1": 6.0, "q8_0": 8.5, "q4_k": 4.5, "q5_k": 5.5, "q6_k": 6.5625,
    "q4_k_m": 4.89, "q5_k_m": 5.70,
}  # fmt: skip
# Share of HBM copy bandwidth at which decode reads GGUF-quantized weights: the dequantize-GEMV
# (kernels/gguf_gemv.py) is bound by its instructions, not its bytes. Fitted on one H200
# (2026-11-26): random llama-8b Q4_K, 16 GiB, decode 222.5 / 214.1 / 194.3 tok/s at 8K/16K/32K =
# weights at 1.49 TB/s of 4.19 (0.35); llama-8b Q8_0 at 8K, 216.9 tok/s = 2.72 TB/s of 4.14 (0.65)
# (bench/results/2026-11-26-h200-quant). fp8 (per-token fp8 activations + torch._scaled_mm): llama-8b
# at 8K on an H100, 165.4 tok/s = 2.02 TB/s of 2.99 (0.68; bench/results/2026-11-26-h100-fp8).
QUANT_GEMV_HBM_FRACTION = {"q8_0": 0.65, "fp8": 0.68}
QUANT_GEMV_HBM_FRACTION_DEFAULT = 0.35
# "none": dense at weight_dtype; "gguf": as the GGUF file stores them (kept quantized); or a GGUF type.
# int4 checkpoints (AWQ, GPTQ) run as Q4_1 blocks (model/int4_checkpoints.py): 5 bits a weight.
INT4_CHECKPOINT_METHODS = ("awq", "gptq")
WEIGHT_QUANTIZATIONS = ("none", "gguf", "fp8", *INT4_CHECKPOINT_METHODS, *GGUF_BITS_PER_WEIGHT)


def _file_is_quantized_gguf(spec: ModelSpec, quantization: str) -> bool:
    return quantization == "gguf" and spec.stored_weight_bytes is not None and spec.weight_dtype_bytes is None


def stored_weight_bytes(spec: ModelSpec, quantization: str, dtype_bytes: int) -> int:
    """All weights as held (on the GPU or, offloaded, in RAM); `dtype_bytes` for dense tensors."""
    if _file_is_quantized_gguf(spec, quantization):
        assert spec.stored_weight_bytes is not None
        return spec.stored_weight_bytes  # a quantized GGUF file, kept in its blocks
    if quantization in GGUF_BITS_PER_WEIGHT:
        return -(-spec.num_params * round(GGUF_BITS_PER_WEIGHT[quantization] * 100) // 800)
    linear = spec.num_layers * spec.layer_linear_params  # the decoder layers' projections
    dense = (spec.num_params - linear) * dtype_bytes  # embeddings, norms, lm_head
    if quantization in INT4_CHECKPOINT_METHODS:  # the projections as Q4_1 blocks: 5 bits a weight
        return linear * 5 // 8 + dense
    if quantization == "fp8":  # 1 byte a weight + a float32 scale per row (model/fp8.py)
        rows = spec.num_heads * spec.head_dim + 2 * spec.kv_heads_dim + 2 * spec.hidden_size  # qkv, o, down
        rows = spec.num_layers * (rows + 2 * spec.intermediate_size)  # + gate_up
        return linear + 4 * rows + dense
    return spec.weight_bytes(dtype_bytes)


def weight_read_fraction(spec: ModelSpec, quantization: str) -> float:
    """Share of HBM bandwidth decode reads the weights at (1.0 dense; quantized: measured)."""
    if _file_is_quantized_gguf(spec, quantization) or quantization in INT4_CHECKPOINT_METHODS:
        return QUANT_GEMV_HBM_FRACTION_DEFAULT  # a GGUF file's mix of types; int4 as Q4_1
    if quantization in GGUF_BITS_PER_WEIGHT or quantization == "fp8":
        return QUANT_GEMV_HBM_FRACTION.get(quantization, QUANT_GEMV_HBM_FRACTION_DEFAULT)
    return 1.0

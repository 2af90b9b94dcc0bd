"""What the weights take and how fast decode reads them, by format: dense, GGUF, fp8, int4 checkpoints.

`stored_weight_bytes` estimates every weight as the engine will hold it from the model's shapes
(or, for a GGUF kept quantized, the file's own tensor bytes); `weight_read_gbs` is the rate decode
reads them at where a kernel bounds it, measured per format (the kernels, not the bytes, bound
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
# Weight bytes a second that decode reads quantized weights at: the dequantize-GEMV kernels are
# bound by their instructions, not by HBM, so this is a rate of its own (capped at HBM's), beside
# costs.STEP_OVERHEAD_PER_LAYER_S (22 us since 2026-12-03; each rate below is fit with it):
# - Q4_K_M: random `llama-8b:q4_k_m` on an H200 at 8K, 376.5-377.8 tok/s (2.652 ms a step) with
#   the re-swept half-group Q4_K lanes and the Q6_K blocks side by side
#   (bench/results/2026-12-04-h200-q6k-side-by-side): 2910 plans it at 1.00, 32K (293.7 tok/s) at
#   1.00, 1 x 2K (404 tok/s) at 1.00; 2750, the fit before the Q6_K change, planned them at 0.96-0.97;
# - Q4_K: Q4_K_M's rate of 2026-12-03 split by its bytes (Q6_K ~27%) in the ratio of the two
#   one-token kernels' own rates on the 8B shapes that day (Q4_K 3.24 TB/s, Q6_K 2.24 TB/s,
#   bench/results/2026-12-03-h200-int16x), moved with the Q4_K kernel's gain since (the re-sweep:
#   2600 -> 2750 for Q4_K_M); Q6_K: what is left of today's Q4_K_M rate beside that Q4_K rate.
#   Both estimates, not fit to rows of their own;
# - Q8_0: random `llama-8b:q8_0` at 8K on an H100 (2.89 TB/s), 245.0 / 245.5 tok/s on the int16-x
#   lanes with their swept table (bench/results/2026-12-05-h200-q41-configs, call 15; the generic
#   kernel: 207.6, which 2338 had planned): 2850 plans them at 1.00 (an H200 row: not measured);
# - Q5_K: random `llama-8b:q5_k` at 8K on an H100, 329.2 tok/s (3.038 ms a step) on the int16-x
#   lanes (bench/results/2026-12-05-q5k-int16x; the generic kernel: 162.1): 2800 planned it at 1.00 on
#   that card's 3.0 TB/s; with the table swept for Q5_K (bench/results/2026-12-05-h200-q41-configs,
#   call 9) 343.7 on another H100 (2.89 TB/s): 2900, the H100's copy rate caps it, plans that at 0.97
#   (an H200 row: not measured);
#   Q5_K_M: that rate and Q6_K's by a Q5_K_M file's bytes (Q6_K ~25%), an estimate;
# - Q4_1 (GGUF Q4_1 files; AWQ/GPTQ checkpoints run as Q4_1): random `llama-8b:q4_1` at 8K on an
#   H100, 315.9 tok/s (3.166 ms a step) on the int16-x lanes (bench/results/2026-12-05-h100-merge-defaults,
#   call 2; the generic kernel: 223.3), fit at 2380; with the table swept for Q4_1
#   (bench/results/2026-12-05-h200-q41-configs) 400.1 tok/s on an H200 (349.0 the old table) and
#   345.4 / 346.1 on an H100: 3250 plans the H200's at 1.00 and the H100's at 1.03 (capped by its
#   copy rate: the kernels outrun HBM there);
# - the other GGUF types (generic kernel): the generic kernel's Q4_K row,
#   215.7 tok/s on an H100 (bench/results/2026-11-26-h100-gemv, --generic), kept the same way;
# fp8 has no entry: its decode GEMV (kernels/fp8_gemv.py) reads at HBM speed like a dense matmul
# (8B fp8 at 8K on an H200: 341.8 tok/s on 2026-12-05, planned 1.04 with the per-layer overhead and
# its untied token embedding gathered, not streamed: PlanRequest.gathered_embedding_bytes). These
# rates are fit to all of a file's bytes, its token embedding included.
QUANT_READ_GBS = {
    "q4_k": 3180.0,
    "q4_k_m": 2910.0,
    "q5_k": 2900.0,
    "q5_k_m": 2750.0,
    "q4_1": 3250.0,
    "q6_k": 2370.0,
    "q8_0": 2850.0,
}
QUANT_READ_GBS_GENERIC = 1267.0
# The same for a step of several tokens (one per sequence decoding together), by token count:
# Q4_K_M's tensor-core kernel (kernels/gguf_mma.py: each weight dequantized once for all tokens,
# so bound by its instructions and loads, more so as tokens are added). Fit like the rates above
# (the step less its KV over HBM and the per-layer overhead, over the blocks' bytes) to random
# `llama-8b:q4_k_m` on an H200, N x 2K: with the Q4_K scale pairs (kept where steps batch and room allows,
# `arithmetic.compute_plan`) 4 / 8 / 16 / 32 at 3.620 / 4.014 / 5.172 / 7.835 ms a step
# (bench/results/2026-12-04-h200-scale-pairs), then 8 and 32 again with Q6_K in the split layout
# (the default on CUDA since 2026-12-05): 2,130.9 / 2,128.0 / 2,104.7 and 4,277.9 / 4,280 / 4,241.1
# tok/s in all over three calls, fit to their means, 2,120 and 4,266
# (bench/results/2026-12-05-h200-q6k-split); with the scales read from the blocks' headers
# (KVSPILL_SCALE_PAIRS=0) 8 / 16 / 32 at 4.551 / 5.989 / 8.478 ms (2026-12-04-h200-mixed-qkv-out,
# 2026-12-04-h200-q4km-peer; 4.472-4.483 and 8.446 ms again beside the pairs), 4 at 920 tok/s
# (2026-12-03-h200-mma-sync). 32 is refit to 4,712.7 tok/s, the step with decode attention's splits
# rounded down to one wave (2 splits, not 3: 6.790 ms against 7.425 / 7.411; 2026-12-05-h200-attn-splits);
# the header-scales rates and 8 (2,191.8 with 8 splits, plan 0.97) stay as fit. 2 tokens (the Q4_K
# lane passes, one read of the weights for both; kernels/gguf_gemv.LANE_PASSES_MAX_TOKENS) fit to
# random llama-8b:q4_k_m 2 x 2K on an H100, 541.3 / 541.8 tok/s in all
# (bench/results/2026-12-06-h100-gated-down, call 25). Other counts take the next larger entry's
# rate (3 tokens: 4's); other types: the tables below, the rest not measured
# (`multi_token_read_gbs`). One token: QUANT_READ_GBS's.
Q4_K_M_READ_GBS_BY_TOKENS = {
    1: QUANT_READ_GBS["q4_k_m"],
    2: 1751.0,
    4: 1848.0,
    8: 1925.0,
    16: 1432.0,
    32: 1225.0,
}
# Q5_K at 2-32 tokens (gguf_mma_configs' Q5_K entries: the tensor-core sub-block form): random
# `llama-8b:q5_k` at N x 2K on an H100, fit the same way: 8 from 1,165.4 / 1,171.1 tok/s in all
# (bench/results/2026-12-05-h100-merge-defaults; 1,167.9 again in 2026-12-05-h200-q41-configs,
# call 18), 4 / 16 / 32 from 628.1 / 628.7, 1,789.0 / 1,787.1 and 2,491.6 / 2,498.0 (same folder,
# calls 17-18; the H100 and H200 have the same SMs and clocks: the kernel, not HBM, bounds it),
# 2 from 566.4 (the lane passes, one read of the weights for both tokens; call 22; the tensor-core
# form there: 327.2, call 20). 3 tokens take 4's rate, 5-8 8's, and so on. A Q5_K_M file's: these times Q5_K_M's one-token rate
# over Q5_K's (its Q6_K share), an estimate.
Q5_K_READ_GBS_BY_TOKENS = {2: 2090.0, 4: 1044.0, 8: 1017.0, 16: 817.0, 32: 604.0}
# Q4_1 (and AWQ / GPTQ checkpoints, run as Q4_1) at 2-4 tokens (the lane passes, a read of the
# weights per two tokens) and 5-32 (gguf_mma_configs' Q4_1 entries: the tensor-core sub-block
# form), fit the same way to random `llama-8b:q4_1` on an H100 at 2 and 4 x 2K, 595.4 and 649.7 /
# 650.2 tok/s in all (3 x 2K: 491.6 / 491.4, planned with 4's rate; calls 22-23), at 8 and 32 x 2K
# 728.0 / 726.9 and 1,976.5 / 1,966.8 (calls 14, 16; 724.5 / 723.7 again in call 24)
# (bench/results/2026-12-05-h200-q41-configs; the kernels, not HBM, bound them, as for Q5_K). 5-8
# tokens take 8's rate, 9-32 32's (16 tokens timed per kernel only, faster than the next entry:
# the plan is low there).
Q4_1_READ_GBS_BY_TOKENS = {2: 2033.0, 4: 988.0, 8: 526.0, 32: 400.0}
# Steps of up to this many Q4_1 tokens run the lane passes (kernels/gguf_gemv.LANE_PASSES_MAX_TOKENS),
# which take rows of any whole 32-weight blocks; the tensor-core form above them whole super-blocks.
Q4_1_LANE_PASS_TOKENS = 4
# Q8_0 at 2 tokens (the lane passes: one read of the weights for both) and 3-4 (the dot kernel),
# fit the same way to random `llama-8b:q8_0` at 2 and 4 x 2K on an H100, 326.9 and 402.1 / 403.0
# tok/s in all (3 x 2K: 303.7 / 303.6, planned with 4's rate; bench/results/2026-12-05-h200-q41-configs,
# calls 22-23). Past 4 tokens: not measured.
Q8_0_READ_GBS_BY_TOKENS = {2: 1632.0, 4: 963.0}
Q4_K_M_HEADER_SCALES_READ_GBS_BY_TOKENS = {
    1: QUANT_READ_GBS["q4_k_m"],
    4: 1452.0,
    8: 1476.0,
    16: 1157.0,
    32: 862.0,
}
# A GGUF file's dominant type (ModelSpec.gguf_main_type) -> the rate key above.
_GGUF_TYPE_RATE = {"Q4_K": "q4_k_m", "Q5_K": "q5_k_m", "Q6_K": "q6_k", "Q8_0": "q8_0", "Q4_1": "q4_1"}
# The CPU GGUF kernel (kernels/cpu_gguf.py) dequantizes in registers and is bound by its
# arithmetic, not RAM: one token reads a type's blocks at this share of the dense fp16 GEMV's
# bytes/s (the CPU rates' `cpu_gemv_gbs`). Measured on the dev host, 2 threads, against dense fp16
# at 28672 x 4096 (7.0 ms, RAM-bound): Q4_K 28672 x 4096 5.4 ms, Q6_K 4096 x 4096 0.90 ms, Q4_1
# 3072 x 576 79 us, Q8_0 49152 x 576 0.95 ms (bench/results/2026-12-07-cpu-gguf-gemv/
# kernel_shapes.txt); per weight about 22 G/s for the 4-bit types, 19 for Q6_K, 30 for Q8_0. The
# embedded SmolLM2 (Q4_1 + its Q8_0 lm_head) comes to 0.51, fit 0.55 from its decode; a random
# Llama-3.2-1B Q4_K_M to 0.39, fit 0.34 (bench/results/2026-12-08-cpu-decode-ops/). Types not
# measured (Q4_0, Q5_*): Q4_K's.
CPU_GGUF_READ_VS_GEMV = {"Q4_K": 0.37, "Q6_K": 0.46, "Q4_1": 0.42, "Q8_0": 0.95}
# A quantization by name (a GGUF type to plan for, an int4 checkpoint) -> the type its blocks are.
_CPU_KERNEL_TYPE = {"q4_k_m": "Q4_K", "q4_k": "Q4_K", "q6_k": "Q6_K", "q8_0": "Q8_0", "q4_1": "Q4_1"}
# "none": dense at weight_dtype; "gguf": as the GGUF file stores them (kept quantized); or a GGUF type.
# int4 checkpoints (AWQ, GPTQ) run as Q4_1 blocks (model/int4_checkpoints.py): 5 bits a weight.
INT4_CHECKPOINT_METHODS = ("awq", "gptq")
WEIGHT_QUANTIZATIONS = ("none", "gguf", "fp8", *INT4_CHECKPOINT_METHODS, *GGUF_BITS_PER_WEIGHT)


def _file_is_quantized_gguf(spec: ModelSpec, quantization: str) -> bool:
    return quantization == "gguf" and spec.stored_weight_bytes is not None and spec.weight_dtype_bytes is None


def holds_gguf_blocks(spec: ModelSpec, quantization: str) -> bool:
    """Whether the projections stay in GGUF blocks: a quantized GGUF file kept as it is, or a
    what-if GGUF type (q4_k_m, ...)."""
    return _file_is_quantized_gguf(spec, quantization) or quantization in GGUF_BITS_PER_WEIGHT


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


def q4_k_m_type(name: str, layer: int, num_layers: int) -> str:
    """The GGUF type llama-quantize gives tensor `name` (HF-style: lm_head, v_proj, down_proj,
    ...) of `layer` in a Q4_K_M file (llama.cpp's llama_tensor_get_type): Q6_K for the output
    and, where `use_more_bits` holds (the first and last eighth of the layers and every third
    between), for attn_v and ffn_down; Q4_K elsewhere."""
    if name == "lm_head":
        return "Q6_K"
    eighth = num_layers // 8
    more_bits = layer < eighth or layer >= 7 * num_layers // 8 or (layer - eighth) % 3 == 2
    return "Q6_K" if name in ("v_proj", "down_proj") and more_bits else "Q4_K"


def q4k_matmul_bytes(spec: ModelSpec, quantization: str) -> int:
    """Bytes of the Q4_K blocks a step multiplies by (projections, a tied embedding as lm_head; an
    untied embedding only gathers rows): a GGUF file's own, or those of a what-if q4_k / q4_k_m
    (its projections as `q4_k_m_type` gives them; its tied embedding is Q6_K); else 0."""
    if _file_is_quantized_gguf(spec, quantization):
        return dict(spec.gguf_matmul_type_bytes).get("Q4_K", 0)
    embedding = spec.vocab_size * spec.hidden_size
    if quantization == "q4_k":
        gathered = 0 if spec.tie_word_embeddings else embedding
        return stored_weight_bytes(spec, quantization, 2) - -(-gathered * 9 // 16)
    if quantization != "q4_k_m":
        return 0
    layers = spec.num_layers
    v_down = spec.hidden_size * (spec.kv_heads_dim + spec.intermediate_size)
    six_bit = sum(1 for i in range(layers) if q4_k_m_type("v_proj", i, layers) == "Q6_K")
    params = layers * spec.layer_linear_params - six_bit * v_down
    return -(-params * 9 // 16)  # 4.5 bits a weight


SCALE_PAIR_MODES = ("auto", "on", "off")


def scale_pairs_possible(device: str, max_num_seqs: int) -> bool:
    """Whether the engine may keep Q4_K weights' scale pairs beside their blocks
    (kernels/gguf_mma_words.pack_scales): on CUDA when steps decode several sequences (the
    tensor-core kernel reads them; one sequence runs the GEMV, which reads the blocks alone). Their
    price: 32 bytes a 144-byte super-block; KVSPILL_SCALE_PAIRS and the plan decide
    (PlanRequest.scale_pairs)."""
    return device == "cuda" and max_num_seqs > 1


def scale_pair_bytes(q4k_bytes: int) -> int:
    """What the scale pairs of `q4k_bytes` of Q4_K blocks take (2 half floats a sub-block of 32)."""
    return q4k_bytes * 32 // 144


def multi_token_read_gbs(
    spec: ModelSpec, quantization: str, num_tokens: int, scale_pairs: bool = True
) -> tuple[bool, float | None]:
    """(known, GB/s) a decode step of `num_tokens` tokens reads the weights at (GB/s None: HBM's);
    known False where the engine's kernels at that count are not measured: past one token, every
    format but Q4_K_M, Q5_K and Q4_1 at 2-32 tokens and Q8_0 at 2-4 (dense and fp8 steps of several tokens
    run cuBLAS / the fp8 GEMV's tensor-core path, whose rates no engine row has fit yet), and
    Q4_K_M past its largest entry.
    `scale_pairs`: whether the engine keeps the Q4_K scale pairs (PlanRequest.scale_pair_bytes)."""
    rate = weight_read_gbs(spec, quantization)
    if num_tokens <= 1:
        return True, rate
    main = spec.gguf_main_type if _file_is_quantized_gguf(spec, quantization) else None
    if quantization == "q4_1" or quantization in INT4_CHECKPOINT_METHODS or main == "Q4_1":
        # the tensor-core form takes rows of whole 256-weight super-blocks only (SmolLM2's 576: not)
        whole = spec.hidden_size % 256 == 0 and spec.intermediate_size % 256 == 0
        taken = whole or num_tokens <= Q4_1_LANE_PASS_TOKENS
        q41 = _next_entry(Q4_1_READ_GBS_BY_TOKENS, num_tokens) if taken else None
        return q41 is not None, q41
    if quantization == "q8_0" or main == "Q8_0":
        q80 = _next_entry(Q8_0_READ_GBS_BY_TOKENS, num_tokens)
        return q80 is not None, q80
    if quantization in ("q5_k", "q5_k_m") or main == "Q5_K":
        q5k = _next_entry(Q5_K_READ_GBS_BY_TOKENS, num_tokens)
        if q5k is None:
            return False, None
        key = "q5_k" if quantization == "q5_k" else "q5_k_m"  # a file whose main type is Q5_K: Q5_K_M
        return True, q5k * QUANT_READ_GBS[key] / QUANT_READ_GBS["q5_k"]
    if quantization != "q4_k_m" and main != "Q4_K":
        return False, None
    q4k = _next_entry(
        Q4_K_M_READ_GBS_BY_TOKENS if scale_pairs else Q4_K_M_HEADER_SCALES_READ_GBS_BY_TOKENS, num_tokens
    )
    return q4k is not None, q4k


def _next_entry(rates: dict[int, float], num_tokens: int) -> float | None:
    """The rate of the smallest token count in `rates` that is >= num_tokens (None past the last)."""
    counts = [n for n in sorted(rates) if n >= num_tokens]
    return rates[counts[0]] if counts else None


def cpu_gguf_read_share(spec: ModelSpec, quantization: str) -> float | None:
    """The share of the CPU's dense GEMV rate (bytes/s) the CPU GGUF kernel reads these weights
    at (CPU_GGUF_READ_VS_GEMV; a file's types weighted by their bytes); None: dense weights."""
    if _file_is_quantized_gguf(spec, quantization):
        by_type = spec.gguf_matmul_type_bytes or ((spec.gguf_main_type or "", 1),)
        seconds = sum(b / CPU_GGUF_READ_VS_GEMV.get(t, CPU_GGUF_READ_VS_GEMV["Q4_K"]) for t, b in by_type)
        return sum(b for _, b in by_type) / seconds
    if quantization in INT4_CHECKPOINT_METHODS:
        return CPU_GGUF_READ_VS_GEMV["Q4_1"]  # as Q4_1 blocks
    if quantization in GGUF_BITS_PER_WEIGHT:
        return CPU_GGUF_READ_VS_GEMV[_CPU_KERNEL_TYPE.get(quantization, "Q4_K")]
    return None


def weight_read_gbs(spec: ModelSpec, quantization: str) -> float | None:
    """GB/s decode reads the weights at when a kernel, not HBM, bounds it; None: HBM bandwidth."""
    if _file_is_quantized_gguf(spec, quantization):
        key = _GGUF_TYPE_RATE.get(spec.gguf_main_type or "")
        return QUANT_READ_GBS[key] if key else QUANT_READ_GBS_GENERIC
    if quantization in INT4_CHECKPOINT_METHODS:
        return QUANT_READ_GBS["q4_1"]  # as Q4_1 blocks
    if quantization in GGUF_BITS_PER_WEIGHT:
        return QUANT_READ_GBS.get(quantization, QUANT_READ_GBS_GENERIC)
    return None  # dense and fp8: HBM-bound

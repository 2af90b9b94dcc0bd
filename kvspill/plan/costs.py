"""The cost model of the plan: the activation peak of a step, and the time of a decode step and
of a prefill, each a floor (bytes over the rate they move at, FLOPs over the rate they run at).

For one sequence in exact mode (DESIGN.md, "The physics"):
    t_token = W / min(B_hbm, B_w) + KV_gpu / B_hbm + cold KV over the cold path + KV_disk / B_disk
            + offloaded weights / B_h2d + per-layer step overhead
with B_w the rate the weights' format is read at where a kernel bounds it (plan/weights.py). The cold
term over "split" is max(f*C / B_stream, (1-f)*C / B_cpu_attn + L*t_cpu), streaming and CPU
attention running at once (the GPU waits for the CPU's result by itself, storage/stream_flag.py);
t_cpu is the CPU path's fixed time per layer (calibrated, else CPU_ATTN_OVERHEAD_PER_LAYER_S),
also paid by "cpu", and 1-f is the engine's split (`split_cpu_share`): both parts end together.
Prefill is compute-bound per chunk, overlapped with streaming the cold KV once per chunk.

The engine on the CPU (rates with `device="cpu"`, plan/host_rates.py) has no HBM and no link:
    t_token = W / B_gemv + KV / B_cpu_kv + L * t_layer
the weights read by the CPU's decode GEMVs, every tier's KV attended on the CPU, and each layer's
fixed cost (its ops run eagerly, one dispatch each), all measured on the host (`cpu_decode_floor`).
No torch, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from kvspill.plan.bandwidths import GB, Bandwidths
from kvspill.plan.cold_rates import (
    EAGER_STREAM_HOST_PER_LAYER_S,
    GATHER_EFFICIENCY,
    SPLIT_EXTRA_PER_LAYER_S,
    STREAM_EFFICIENCY,
    SplitThresholds,
    auto_split_min_layer_bytes,
    auto_uses_split,
    cpu_layer_seconds,
    graphed_split_min_layer_bytes,
    split_cpu_share,
)
from kvspill.plan.spec import ModelSpec

# Per decode step and layer, what the kernels cost beyond their bytes (about ten graph-replayed
# launches of a few microseconds each and the GEMVs' shortfall from the copy bandwidth). With
# async scheduling (the CUDA default) the host's work runs under the GPU's and adds nothing.
# (step time - bytes at the plan's HBM rate) / layers on an H200 on 2026-12-03, after programmatic
# dependent launch and the one-token dense GEMV: 19 us for W3 32K (187.3 tok/s), 17 us for 8B bf16
# at 8K (220.9), 25 us for W1 8K (958.0); 22 us plans them at 0.98 / 0.97 / 1.06 and 8B fp8 at 8K
# at 1.00 (bench/results/2026-12-03-h200-int16x-engine). It was 37-40 us on 2026-11-26 (H100 and
# H200, docs/performance-history.md). The serial engine (--no-async-scheduling) adds 0.2-0.3 ms of
# host work per step on top (47 us per layer was the fit before async scheduling). Since
# 2026-12-07 a dense or fp8 step's bytes leave out an untied token embedding (gathered, not
# streamed: `PlanRequest.gathered_embedding_bytes`); 22 us then plans the H200 rows of 2026-12-05
# (bench/results/2026-12-05-h200-q41-configs) at 1.00 (8B bf16 8K), 1.04 (fp8), 1.03 (W1), 1.01
# (W3 32K) and the H100 rows of 2026-12-07 (2026-12-07-widen-argmax) at 0.91 / 0.93 / 0.93.
STEP_OVERHEAD_PER_LAYER_S = 22e-6
# Decode over fp8 or int8 KV in the gpu tier (CUDA): the decode kernel widens the values in
# registers and its time follows the KV's bf16 bytes, not the stored ones; int8 also turns q, k, v
# and the output by its Hadamard basis in every layer (runner/attention.py). Fit to two all-GPU
# rows on H200s, one per format, where reading the stored bytes at HBM rate planned 1.29-1.44x the
# measured speed: fp8 at W3 128K (100.25 tok/s, below bf16's 111-115: bench/results/2026-11-27-
# h200-stream-graphs/) and int8 at W3 32K (141.74, 2026-11-28-h200-int8-planes/, which gives the
# 34 us). The cold paths' rates are their own (plan/cold_rates.py).
KV_DECODE_READS_AS_BF16 = ("fp8", "int8")
INT8_BASIS_TURN_PER_LAYER_S = 34e-6


def gpu_kv_decode_cost(
    kv_format: str, on_cuda: bool, stored_bytes_per_token: int, bf16_bytes_per_token: int, num_layers: int
) -> tuple[int, float]:
    """(bytes per gpu-tier token that a decode step's KV time follows, seconds the step adds per
    token generated): the stored bytes and nothing, or on CUDA bf16's bytes for fp8/int8 KV plus
    int8's basis turns (KV_DECODE_READS_AS_BF16)."""
    if not on_cuda or kv_format not in KV_DECODE_READS_AS_BF16:
        return stored_bytes_per_token, 0.0
    return bf16_bytes_per_token, num_layers * INT8_BASIS_TURN_PER_LAYER_S if kv_format == "int8" else 0.0


COLD_STAGE_TOKENS = 16384  # tokens of one layer's cold KV per staging buffer (two: double-buffered)
# A sparse decode step per layer beyond its bytes. Replayed as a CUDA graph (runner/sparse_graphs.py:
# one cold sequence in the cpu tier, the default on one GPU) it is the selection's GPU time,
# which grows with the cold blocks scored and ranked: a least-squares fit of (step time - the
# plan's other terms) / layers on an H200 (2026-11-27, bench/results/2026-11-27-h200-w5-block-score/)
# to three rows: 0.084 ms at W3 128K (5.5K cold blocks), 0.144 at W3 512K (32K), 0.147 at W1 1M
# (48K); the fit is within 10% of each. (Before the entries union and 20-bit keys: 0.065 ms +
# 3.75 ns per block; with torch's top-k's: 0.24 ms + 3.7 ns.) Eager (several sequences, disk
# blocks, --enforce-eager, tensor parallelism): about 45 launches per layer whose host time is
# not hidden, 0.85-1.25 ms per layer on an H100 (2026-11-26, bench/results/2026-11-26-h100-w5-sparse-cache/).
SPARSE_GRAPH_OVERHEAD_PER_LAYER_S = 0.081e-3
SPARSE_GRAPH_OVERHEAD_PER_BLOCK_S = 1.56e-9  # per cold block and layer
SPARSE_OVERHEAD_PER_LAYER_S = 1.0e-3  # eager
# Tensor parallelism: a decode step runs 2 all-reduces per layer, one for the embedding and the
# logits' all-gather; a few KB each, so latency-bound, growing with the ranks. Fit to the step time
# beyond the plan's other terms on 4 x H200 with NVLink (2026-11-26, bench/results/2026-11-26-h200x4-tp/):
# 0.57-0.61 ms a step at TP=2 and 0.93-1.04 ms at TP=4 over 66 collectives, 9 and 15 us each
# (the NCCL kernels alone were 0.40 and 0.59 ms; the rest is the launch gaps around them).
TP_COLLECTIVE_BASE_S = 3e-6
TP_COLLECTIVE_PER_DOUBLING_S = 6e-6


def collectives_s(num_layers: int, tensor_parallel_size: int) -> float:
    """Seconds of one decode step's collectives with `tensor_parallel_size` ranks (0 with one)."""
    if tensor_parallel_size <= 1:
        return 0.0
    per_call = TP_COLLECTIVE_BASE_S + TP_COLLECTIVE_PER_DOUBLING_S * math.log2(tensor_parallel_size)
    return (2 * num_layers + 2) * per_call


@dataclass(frozen=True)
class DecodeFloor:
    """One decode step of one sequence, in seconds per component (exact attention)."""

    weights_s: float  # all weights read once from HBM
    gpu_kv_s: float  # gpu-tier KV read from HBM
    cold_kv_s: float  # cpu+disk KV over the cold path (stream, CPU attention, or both)
    disk_read_s: float  # disk-tier KV read from disk every step
    stream_fraction: float  # of cold KV bytes streamed to the GPU; the rest attended on the CPU
    streamed_bytes: int
    cpu_attn_bytes: int
    disk_bytes: int
    overhead_s: float = 0.0  # kernel launches and host work per step (STEP_OVERHEAD_PER_LAYER_S)
    offload_s: float = 0.0  # offloaded weights copied over PCIe every step (--cpu-offload-gb)
    summary_s: float = 0.0  # sparse: every cold block's key summary read from HBM for scoring
    collective_s: float = 0.0  # tensor parallelism: the step's all-reduces (`collectives_s`)
    # A stream step under a CUDA graph gathers its cold blocks on a second stream while the
    # weights and the gpu KV are read: the shorter of the two is hidden (`decode_floor`).
    overlap_s: float = 0.0
    cold_graphs: bool = False  # its cold part replays a stream graph (runner/stream_graphs.py)

    @property
    def total_s(self) -> float:
        return (
            -self.overlap_s
            + self.weights_s
            + self.gpu_kv_s
            + self.cold_kv_s
            + self.disk_read_s
            + self.overhead_s
            + self.offload_s
            + self.summary_s
            + self.collective_s
        )


@dataclass(frozen=True)
class SparseCold:
    """What a sparse decode step reads of the cold KV (`--cold-attention sparse`)."""

    selected_fraction: float  # of the cold blocks attended: min(1, budget / cold tokens)
    summary_bytes: int  # the cold blocks' key summaries, on the GPU
    cold_blocks: int = 0  # cold blocks of the sequence (scored and ranked per layer)
    graphs: bool = False  # its steps replay a CUDA graph (see SPARSE_GRAPH_OVERHEAD_PER_LAYER_S)

    def overhead_per_layer_s(self) -> float:
        if not self.graphs:
            return SPARSE_OVERHEAD_PER_LAYER_S
        return SPARSE_GRAPH_OVERHEAD_PER_LAYER_S + self.cold_blocks * SPARSE_GRAPH_OVERHEAD_PER_BLOCK_S


# Bytes the sampler holds per logit of a sampled row at its peak, every option on (logit bias,
# penalties, logprobs, top-k/top-p's sort with its int64 indices, min-p, the random draw's noise),
# fp32 logits included: counted from sampling/sampler.py; start-up measures the real figure
# (runner/profile.py) and that replaces the plan's.
SAMPLER_BYTES_PER_LOGIT = 36
# Rows of prompt logprobs scored at once (runner/prompt_logprobs.SLICE_ROWS; a test holds them equal)
PROMPT_LOGPROB_ROWS = 256


def cold_staging_bytes(spec: ModelSpec, kv_bytes: int, cold_stage_tokens: int = COLD_STAGE_TOKENS) -> int:
    """The double-buffered staging of one layer's cold K and V streamed in (cold_stage_tokens each):
    buffers the CUDA runner allocates beside the pool at start-up (its stream stager)."""
    return 2 * cold_stage_tokens * 2 * spec.kv_heads_dim * kv_bytes


def _layer_transient_bytes(spec: ModelSpec, num_tokens: int, act_bytes: int) -> tuple[int, int, int]:
    """(residual, attention, mlp) bytes alive at once while `num_tokens` tokens go through a layer.

    t = num_tokens, h = hidden, a = activation bytes, I = intermediate, q = num_heads*head_dim,
    kv = num_kv_heads*head_dim."""
    t, h, d = num_tokens, spec.hidden_size, spec.head_dim
    q_width, kv_width = spec.num_heads * d, spec.kv_heads_dim
    residual = 3 * t * h * act_bytes  # residual stream, its normed copy, the block's output
    # attention: fused qkv [t, q+2kv], q and k after rope [t, q+kv], output [t, q]; fp32 partials
    # (o, lse) of the gpu part and the cold part before the log-sum-exp merge
    attn = t * (q_width + 2 * kv_width + q_width + kv_width + q_width) * act_bytes
    attn += 2 * t * spec.num_heads * (d + 1) * 4
    # mlp: fused gate_up [t, 2I], silu(gate) [t, I], silu(gate) * up [t, I]
    mlp = 4 * t * spec.intermediate_size * act_bytes
    return residual, attn, mlp


def activation_peak_bytes(
    spec: ModelSpec,
    num_tokens: int,
    num_seqs: int,
    act_bytes: int,
    kv_bytes: int,
    cold_stage_tokens: int = COLD_STAGE_TOKENS,
    dequant_bytes: int = 0,
) -> int:
    """Peak live transients of the largest step: `num_tokens` tokens of `num_seqs` sequences
    (flash-style attention, no [T, ctx] scores), each sequence's next token sampled.

    The largest of three phases, each counting what is alive at once (_layer_transient_bytes):
    attention adds the double-buffered staging of one layer's cold K and V streamed in
    (cold_stage_tokens each). `dequant_bytes`: a quantized weight's dense slice a projection holds
    while it multiplies (GGUF past the GEMV's rows; kernels/quant_linear.py), in the mlp and the
    logits phase.
    """
    residual, attn, mlp = _layer_transient_bytes(spec, num_tokens, act_bytes)
    attn += cold_staging_bytes(spec, kv_bytes, cold_stage_tokens)
    mlp += dequant_bytes
    # logits: the sampled rows (one per sequence) through the sampler, or one slice of prompt
    # logprobs (its fp32 logits and their log-softmax)
    t = num_tokens
    rows = max(num_seqs, min(t, PROMPT_LOGPROB_ROWS))
    sampled = max(num_seqs * SAMPLER_BYTES_PER_LOGIT, min(t, PROMPT_LOGPROB_ROWS) * 8) * spec.vocab_size
    logits = rows * spec.hidden_size * act_bytes + sampled + dequant_bytes
    return residual + max(attn, mlp, logits)


def mixed_graph_bytes(spec: ModelSpec, buckets: list[int], chunk: int, prefills: int, act_bytes: int) -> int:
    """What the mixed-step CUDA graphs (runner/mixed_graphs.py) add to the decode graphs' memory
    pool: each decode bucket b's outputs, kept for its replays (fp32 logits and int64 greedy ids of
    b + `prefills` rows), and the largest graph's step (b + `chunk` tokens through a layer; the
    lm_head reads only the sampled rows, the sampler runs outside the graph, the cold staging
    buffers are the runner's). Counted beside the decode graphs' peak, not within it: on an H200
    (W3 8B 128K fp8, 8 sequences, bench/results/2026-12-03-h200-int16x-engine) the mixed graphs
    took 0.045 GiB more of the card than decode graphs alone; this counts 0.045 GiB there, where
    the peak of a whole step of those tokens (the sampler's and prompt logprobs' rows) gave 0.19."""
    if not buckets:
        return 0
    outputs = sum((b + prefills) * (spec.vocab_size * 4 + 8) for b in buckets)
    residual, attn, mlp = _layer_transient_bytes(spec, buckets[-1] + chunk, act_bytes)
    lm_head_input = (buckets[-1] + prefills) * spec.hidden_size * act_bytes
    return outputs + residual + max(attn, mlp, lm_head_input)


def decode_floor(
    weight_bytes: int,
    gpu_kv_bytes: int,
    cpu_kv_bytes: int,
    disk_kv_bytes: int,
    bw: Bandwidths,
    cold_path: str = "auto",
    num_layers: int = 0,
    offloaded_bytes: int = 0,
    weight_read_gbs: float | None = None,
    sparse: SparseCold | None = None,
    cold_graphs: bool = False,
    kv_format: str = "bf16",
    split: SplitThresholds | None = None,
    cpu_gguf_share: float | None = None,
) -> DecodeFloor:
    """Seconds per decode token: weights and GPU KV over HBM, cold KV over the engine's cold path
    ("stream": streamed to the GPU; "cpu": attended in RAM; "split": both at once, shared in the
    ratio of their rates, a step under `split`'s thresholds streaming all; "auto": split or
    stream, see `resolve_auto`; "sparse": see `_sparse`), disk KV over disk, plus the per-layer
    step overhead.

    `cold_graphs`: a step whose cold blocks all stream may replay a CUDA graph
    (runner/stream_graphs.py: one GPU, graphs on, no disk blocks); it gathers them at
    GATHER_EFFICIENCY x H2D beneath the step's HBM work. Eager stream steps are at least
    EAGER_STREAM_HOST_PER_LAYER_S per layer (the host's launches); split steps add
    SPLIT_EXTRA_PER_LAYER_S of the KV's `kv_format` (plan/cold_rates.py). On the CPU: `cpu_decode_floor`."""
    if bw.device == "cpu":
        ram_kv = gpu_kv_bytes + cpu_kv_bytes
        return cpu_decode_floor(weight_bytes, ram_kv, disk_kv_bytes, bw, num_layers, cpu_gguf_share)
    if cold_path == "sparse" and sparse is not None:
        exact = decode_floor(
            weight_bytes, gpu_kv_bytes, 0, 0, bw, "stream", num_layers, offloaded_bytes, weight_read_gbs
        )
        return _sparse(exact, cpu_kv_bytes, disk_kv_bytes, bw, num_layers, sparse)
    hbm, h2d, cpu = bw.hbm_gbs or 1.0, bw.h2d_gbs or 1.0, bw.cpu_attn_gbs or 1.0
    stream = bw.stream_gbs or STREAM_EFFICIENCY * h2d
    cold = cpu_kv_bytes + disk_kv_bytes  # disk blocks pass through RAM, then take either path
    graphable = cold_graphs and disk_kv_bytes == 0
    layer_s = cpu_layer_seconds(bw) if num_layers else 0.0  # no layer count: bytes alone
    layer_bytes = cold / max(num_layers, 1)
    cold_path = _step_path(cold_path, split, bw, layer_bytes, cpu, layer_s, graphable, kv_format)
    cpu_share = split_cpu_share(layer_bytes, stream, cpu, layer_s)
    fraction = {"cpu": 0.0, "split": 1.0 - cpu_share}.get(cold_path, 1.0)
    streamed = round(cold * fraction)
    cpu_s = (cold - streamed) / (cpu * GB) + (num_layers * layer_s if cold > streamed else 0.0)
    graphed = graphable and cold > 0 and streamed == cold
    floor = DecodeFloor(
        weights_s=weight_bytes / (min(hbm, weight_read_gbs or hbm) * GB),
        gpu_kv_s=gpu_kv_bytes / (hbm * GB),
        cold_kv_s=max(streamed / ((GATHER_EFFICIENCY * h2d if graphed else stream) * GB), cpu_s),
        disk_read_s=disk_kv_bytes / ((bw.disk_read_gbs or 1.0) * GB),
        stream_fraction=fraction if cold else 0.0,
        streamed_bytes=streamed,
        cpu_attn_bytes=cold - streamed,
        disk_bytes=disk_kv_bytes,
        overhead_s=num_layers * STEP_OVERHEAD_PER_LAYER_S,
        # The copy stream runs beside compute, but offloaded layers wait for their copy: the
        # layer copies add up (PCIe-bound, as vLLM's cpu_offload_gb).
        offload_s=offloaded_bytes / (h2d * GB),
        cold_graphs=graphed,
    )
    return _step_shape(floor, num_layers, kv_format)


def cpu_decode_floor(
    weight_bytes: int,
    ram_kv_bytes: int,
    disk_kv_bytes: int,
    bw: Bandwidths,
    num_layers: int,
    gguf_share: float | None = None,
) -> DecodeFloor:
    """Seconds per decode token of the engine on the CPU (module docstring): the weights at the
    CPU's GEMV rate (GGUF blocks at `gguf_share` of it: plan/weights.cpu_gguf_read_share), the KV
    in RAM at its attention rate, the disk tier's read, the layers' fixed cost."""
    gemv, attn = bw.cpu_gemv_gbs or 1.0, bw.cpu_kv_gbs or 1.0
    weights_gbs = gemv * (gguf_share or 1.0)
    return DecodeFloor(
        weights_s=weight_bytes / (weights_gbs * GB),
        gpu_kv_s=ram_kv_bytes / (attn * GB),  # the "gpu" tier is RAM, attended by the CPU kernel
        cold_kv_s=disk_kv_bytes / (attn * GB),
        disk_read_s=disk_kv_bytes / ((bw.disk_read_gbs or 1.0) * GB),
        stream_fraction=0.0,
        streamed_bytes=0,
        cpu_attn_bytes=ram_kv_bytes + disk_kv_bytes,
        disk_bytes=disk_kv_bytes,
        overhead_s=num_layers * (bw.cpu_layer_s or 0.0),
    )


def _step_path(
    cold_path: str,
    split: SplitThresholds | None,
    bw: Bandwidths,
    layer_bytes: float,
    cpu_gbs: float,
    cpu_layer_s: float,
    graphable: bool,
    kv_format: str,
) -> str:
    """The exact path of this step: "auto" resolved from the bandwidths (`resolve_auto`), and a
    "split" step with too few cold bytes to hand over streamed (the engine's rule, `split`)."""
    if cold_path == "auto":
        return resolve_auto(bw, layer_bytes, cpu_gbs, cpu_layer_s, graphable, kv_format)
    if cold_path == "split" and split is not None and not split.splits(layer_bytes, graphable):
        return "stream"
    return cold_path


def _step_shape(floor: DecodeFloor, num_layers: int, kv_format: str) -> DecodeFloor:
    """`floor` with what the step's shape adds or hides: a graphed stream step hides its gather
    beneath the HBM work; an eager split step pays SPLIT_EXTRA_PER_LAYER_S; an eager stream step
    takes at least the host's launches (EAGER_STREAM_HOST_PER_LAYER_S)."""
    cold = floor.streamed_bytes + floor.cpu_attn_bytes
    if floor.cold_graphs:
        return replace(floor, overlap_s=min(floor.cold_kv_s, floor.weights_s + floor.gpu_kv_s))
    if cold and 0 < floor.streamed_bytes < cold:  # an eager split step
        extra = num_layers * SPLIT_EXTRA_PER_LAYER_S[kv_format]
        return replace(floor, overhead_s=floor.overhead_s + extra)
    if cold and floor.streamed_bytes == cold:  # an eager stream step: at least the host's launches
        short = num_layers * EAGER_STREAM_HOST_PER_LAYER_S - floor.total_s
        return replace(floor, overhead_s=floor.overhead_s + max(0.0, short))
    return floor


def resolve_auto(
    bw: Bandwidths, layer_bytes: float, cpu_gbs: float, cpu_layer_s: float, graphable: bool, kv_format: str
) -> str:
    """The exact path "auto" takes on a GPU for a step with `layer_bytes` of cold KV per layer,
    from bandwidths alone (a caller of `decode_floor` without the engine's record): "split" where
    the calibration says the CPU pays and the step has enough bytes to hand over (the thresholds
    `plan/choices.resolve_choices` puts in the engine's record), else "stream"."""
    if not auto_uses_split(bw):
        return "stream"
    graphed = graphed_split_min_layer_bytes(bw, cpu_gbs, cpu_layer_s, kv_format) if graphable else 0
    split = SplitThresholds(auto_split_min_layer_bytes(bw), graphed)
    return "split" if split.splits(layer_bytes, graphable) else "stream"


def _sparse(
    exact_hot: DecodeFloor,
    cpu_kv_bytes: int,
    disk_kv_bytes: int,
    bw: Bandwidths,
    num_layers: int,
    sparse: SparseCold,
) -> DecodeFloor:
    """A decode row of `--cold-attention sparse`: the exact floor of the gpu part, plus the
    selected share of the cold KV gathered to the GPU, the scan of the summaries and the scoring."""
    h2d, hbm = bw.h2d_gbs or 1.0, bw.hbm_gbs or 1.0
    selected = round((cpu_kv_bytes + disk_kv_bytes) * sparse.selected_fraction)
    disk_selected = round(disk_kv_bytes * sparse.selected_fraction)
    return replace(
        exact_hot,
        cold_kv_s=selected / (GATHER_EFFICIENCY * h2d * GB),
        disk_read_s=disk_selected / ((bw.disk_read_gbs or 1.0) * GB),
        stream_fraction=1.0 if selected else 0.0,
        streamed_bytes=selected,
        disk_bytes=disk_selected,
        overhead_s=exact_hot.overhead_s + num_layers * sparse.overhead_per_layer_s(),
        summary_s=sparse.summary_bytes / (hbm * GB),
    )


# The prefill attention kernel's FLOP rate as a share of the calibrated dense matmul rate
# (`gpu_tflops`), by the KV format its tiles are read in. Fit to times to the first token on H200
# hosts (matmul 736-800 TFLOP/s), chunks of 4K-16K tokens (bench/results/2026-11-27-h200-plan-rope-
# peer/, -w5-block-score/, -w5-sparse-graphs/, -auto-crossover/, 2026-11-28-h200-w5-sparse-overlap/):
# - bf16 0.37: W3 128K (17.6-17.9 s, three runs, two placements), W3 512K (280-282 s), W1 1M
#   (264-268 s): each within 5%.
# - fp8 0.30: W3 128K (22.6, 23.4 s) and 256K (81.2 s), within 5%: tiles widened in registers.
# - int8 0.20: W3 128K (32.1 s; 2.2 s at 32K: plan 1.12) with the value-plane layout
#   (bench/results/2026-11-28-h200-int8-planes/). The row layout before it (head_dim + 4-byte rows,
#   no wide loads) ran at 0.095: 64.2-68.4 s.
# fp16 and fp32 take bf16's (not measured). The CPU engine's attention is another kernel: 1.
PREFILL_ATTENTION_SHARE = {"bf16": 0.37, "fp16": 0.37, "fp32": 0.37, "fp8": 0.30, "int8": 0.20}


def prefill_seconds(
    spec: ModelSpec,
    context_len: int,
    chunk: int,
    gpu_tokens: int,
    cpu_tokens: int,
    weight_bytes: int,
    kvpt: int,
    bw: Bandwidths,
    attention_share: float = 1.0,
) -> float:
    """Time to the first token: per chunk, compute overlapped with streaming its cold KV once.

    FLOPs per chunk of n tokens after s earlier ones: 2 * linear params * n (every matmul is a
    multiply-add per weight) at the matmul rate, plus 4 * layers * num_heads * head_dim per
    (query, key) pair (QK^T and PV, 2 FLOPs each), with n*s + n(n+1)/2 causal pairs, at
    `attention_share` of it (`PREFILL_ATTENTION_SHARE`). lm_head runs for the last row only.
    """
    flop_rate = (bw.gpu_tflops or 1.0) * 1e12
    hbm, h2d, d2h = (bw.hbm_gbs or 1.0) * GB, (bw.h2d_gbs or 1.0) * GB, (bw.d2h_gbs or 1.0) * GB
    disk = (bw.disk_read_gbs or 1.0) * GB
    linear_flops = 2 * spec.num_layers * spec.layer_linear_params
    pair_flops = 4 * spec.num_layers * spec.num_heads * spec.head_dim
    resident_cap = max(0, gpu_tokens - chunk)  # earlier tokens that stay on the GPU during a chunk
    total = 2 * spec.hidden_size * spec.vocab_size / flop_rate
    for start in range(0, context_len, chunk):
        n = min(chunk, context_len - start)
        pairs = n * start + n * (n + 1) // 2
        resident = min(start, resident_cap)
        cold = start - resident
        matmul_s = linear_flops * n / flop_rate + pair_flops * pairs / (flop_rate * attention_share)
        compute = max(matmul_s, (weight_bytes + resident * kvpt) / hbm)
        newly_cold = max(0, start + n - resident_cap) - max(0, start - resident_cap)
        disk_bytes = max(0, cold - cpu_tokens) * kvpt  # the disk part, read back every chunk
        disk_bytes += (max(0, cold + newly_cold - cpu_tokens) - max(0, cold - cpu_tokens)) * kvpt  # spilled
        transfer = max(cold * kvpt / h2d, newly_cold * kvpt / d2h) + disk_bytes / disk
        total += max(compute, transfer)
    return total

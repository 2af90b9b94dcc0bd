"""Environment variables kvspill reads: in this module only, once, through `env_settings()`.

Invariants:
- Nothing is read at import time; `env_settings()` reads `os.environ` on its first call and
  caches the frozen result (tests call `read_env_settings(environ)` or `env_settings.cache_clear()`).
  The CUDA-graph switches (`cuda_graphs_on`) are read at each call (see there).
- Every variable is `KVSPILL_*` and documented on its field.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_CALIBRATION_PATH = "~/.cache/kvspill/calibration.json"
DEFAULT_EXT_CACHE = "~/.cache/kvspill/ext"
DEFAULT_GGUF_CACHE = "~/.cache/kvspill/gguf"


@dataclass(frozen=True)
class EnvSettings:
    """Settings taken from the environment."""

    # KVSPILL_CALIBRATION: where `kvspill doctor --calibrate` saves measured bandwidths and
    # where `kvspill plan` and the engine read them.
    calibration_path: Path
    # KVSPILL_EXT_CACHE: where C++ kernels built at run time are kept (one file per source,
    # flags and CPU; default ~/.cache/kvspill/ext).
    ext_cache_dir: Path = Path(DEFAULT_EXT_CACHE).expanduser()
    # KVSPILL_GGUF_CACHE: where the HF config and tokenizer derived from a .gguf file are kept
    # (one entry per file, size and mtime; default ~/.cache/kvspill/gguf); "off": no cache.
    gguf_cache_dir: Path | None = Path(DEFAULT_GGUF_CACHE).expanduser()


def read_env_settings(environ: Mapping[str, str]) -> EnvSettings:
    """Settings from `environ` (uncached)."""
    calibration = environ.get("KVSPILL_CALIBRATION") or DEFAULT_CALIBRATION_PATH
    ext_cache = environ.get("KVSPILL_EXT_CACHE") or DEFAULT_EXT_CACHE
    gguf_cache = environ.get("KVSPILL_GGUF_CACHE") or DEFAULT_GGUF_CACHE
    return EnvSettings(
        calibration_path=Path(calibration).expanduser(),
        ext_cache_dir=Path(ext_cache).expanduser(),
        gguf_cache_dir=None if gguf_cache.lower() == "off" else Path(gguf_cache).expanduser(),
    )


@functools.cache
def env_settings() -> EnvSettings:
    """Settings from the process environment, read on the first call."""
    return read_env_settings(os.environ)


def cuda_graphs_on(kind: str, default: bool = True) -> bool:
    """Whether KVSPILL_<kind>_CUDA_GRAPHS (kind: TP, SPARSE, STREAM or MIXED) lets those steps
    replay graphs: "0" runs them eagerly, to compare, "1" replays them; unset, `default`. Read at
    each call, unlike `env_settings()`: a bench or test turns it off between two engines of one
    process, and the engine and its plan must read the same value."""
    value = os.environ.get(f"KVSPILL_{kind}_CUDA_GRAPHS")
    return default if value is None else value != "0"


def switch_on(name: str) -> bool:
    """A default-on switch of the engine's fast paths: False where KVSPILL_<name>=0, to compare.
    Read at each call, like `cuda_graphs_on`. The switches: PDL (programmatic dependent launch,
    kernels/pdl.py), INT16_X (the one-token Q4_K / Q5_K / Q6_K int16-x GEMVs, kernels/gguf_gemv.py),
    MIXED_GEMV (one launch for a one-token projection of Q4_K / Q5_K then Q6_K rows,
    kernels/gguf_gemv_mixed.py), FUSED_ROPE_DECODE (decode attention does RoPE and the K/V store,
    runner/attention.py),
    EARLY_READS (reads ahead of the PDL wait in decode attention and RMSNorm, kernels/pdl.py),
    GPU_WAITS_FOR_CPU (storage/stream_flag.py), SPARSE_OVERLAP (`sparse_overlap_on`)."""
    return os.environ.get(f"KVSPILL_{name}", "1") != "0"


def q41_int16x_on() -> bool:
    """One token of bf16 / fp16 x on Q4_1 weights (int4 checkpoints, AWQ and GPTQ, load as Q4_1)
    takes the int16-x lanes (kernels/gguf_gemv_int16x.q41_int16x_kernel) unless KVSPILL_Q41_INT16X=0
    (or KVSPILL_INT16_X=0): the generic FMA kernel instead. Random 8B Q4_1 at 8K: 223.3 -> 315.9
    tok/s, the 8B shapes' kernels 1.45-1.64x (H100, bench/results/2026-12-05-h100-merge-defaults, call 2)."""
    return _binary_switch("Q41_INT16X", default=True)


def q80_int16x_on() -> bool:
    """One token of bf16 / fp16 x on Q8_0 weights of an even block count takes the int16-x lanes
    (kernels/gguf_gemv_int16x.q80_int16x_kernel) unless KVSPILL_Q80_INT16X=0 (or KVSPILL_INT16_X=0):
    the generic FMA kernel instead. Random 8B Q8_0 at 8K: 207.6 -> 245.5 tok/s, the 8B shapes'
    kernels 1.16-1.39x (H100, bench/results/2026-12-05-h200-q41-configs, call 15 of 2026-12-05 21:23)."""
    return _binary_switch("Q80_INT16X", default=True)


def gated_words_on() -> bool:
    """An MLP's down projection on the tensor-core words form (2-64 tokens of Q4_K / Q6_K) applies
    the SiLU in its x permutation (kernels/gguf_mma_words.words_x, gated): one launch a layer less
    than the SiLU kernel then the permutation, the same values. KVSPILL_GATED_WORDS=0 turns it off.
    Random llama-8b:q4_k_m, H100: 4 / 8 / 32 x 2K +0.9 / +0.6 / +0.9%, 16 x 2K equal
    (bench/results/2026-12-06-h100-gated-down, call 27). Read when the model runs (a CUDA graph keeps
    what it captured)."""
    return _binary_switch("GATED_WORDS", default=True)


def fused_decode_on() -> bool:
    """One decode token of an fp8 model folds each RMSNorm, the SiLU and the residual adds into
    its GEMVs (model/llama.LlamaDecoderLayer, kernels/fp8_gemv.GemvFusion): four launches a layer
    instead of seven around attention, the same values up to the order of the norm's sum (with the
    norm handoff, the default, `norm_handoff_on`, the norms after the residual adds are handed from
    the GEMV before them instead). KVSPILL_FUSED_DECODE=0 turns it off. 8B fp8 at 8K 3.655 / 3.653
    -> 3.589 / 3.594 ms a step (-1.7%); dense weights were faster on the separate kernels than with
    the norms so folded (8B bf16 +1.0%, W1 +0.5-0.9% fused: under PDL the separate kernels already
    overlap; H100, 2026-12-06, bench/results/2026-12-06-fused-decode-forms), so dense layers fuse in
    the norm handoff's form only (`norm_handoff_on`). Read when the model runs (a CUDA graph keeps
    what it captured)."""
    return _binary_switch("FUSED_DECODE", default=True)


def norm_handoff_on() -> bool:
    """Fused decode (`fused_decode_on`) hands each RMSNorm after a residual add from the GEMV that
    adds (its programs write h * weight and their rows' sums of h^2) to the GEMV after the norm
    (its dot products scaled by rstd from those sums), instead of each program of the later GEMV
    summing the whole row first (kernels/norm_handoff.NormHandoff). Dense bf16 / fp16 layers and
    GGUF ones fuse in this form only. On unless KVSPILL_NORM_HANDOFF=0, a decode step at 8K against
    it off (H100, 2026-12-07, bench/results/2026-12-07-fixed-kernels, calls 2, 6 and 10): 8B bf16
    5.710 / 5.711 -> 5.584 / 5.581 ms, W1 1.202 / 1.203 -> 1.186 / 1.186; 8B fp8 3.594 / 3.592
    (norms in the GEMV's prologue) -> 3.549 / 3.549 (its consumers summing the handed sums before
    their K loop); random 8B Q4_K_M 2.729 / 2.727 / 2.735 -> 2.719 / 2.716 / 2.723 (with the
    producers' tail loads at once, call 9; equal before). Read when the model runs (a CUDA graph
    keeps what it captured)."""
    return _binary_switch("NORM_HANDOFF", default=True)


def lane_passes() -> int | None:
    """KVSPILL_LANE_PASSES=N (0-16) for every type: a step of 2..N tokens on Q5_K, Q4_1, Q8_0 or
    Q4_K weights runs the one-token int16-x lanes a pass per two tokens (each pass reads the
    weights) instead of the tensor-core, dot or float-lane kernel that reads them once; 0 off.
    Unset: None, each type's measured default (kernels/gguf_gemv.LANE_PASSES_MAX_TOKENS). Read at
    each call."""
    value = os.environ.get("KVSPILL_LANE_PASSES", "")
    if value == "":
        return None
    if not value.isdigit() or int(value) > 16:
        raise ValueError(f"KVSPILL_LANE_PASSES must be a token count from 0 to 16, got {value!r}")
    return int(value)


def _binary_switch(name: str, default: bool) -> bool:
    """KVSPILL_<name>: "1" on, "0" off, unset or empty `default`; anything else a ValueError."""
    value = os.environ.get(f"KVSPILL_{name}", "")
    if value not in ("0", "1", ""):
        raise ValueError(f"KVSPILL_{name} must be 0 or 1, got {value!r}")
    return default if value == "" else value == "1"


def scale_pairs_mode() -> str:
    """KVSPILL_SCALE_PAIRS: whether a GGUF model's Q4_K weights keep scale pairs for batched steps
    (kernels/gguf_mma_words.pack_scales): unset "auto" (where the plan still fits a whole context
    on the GPU beside them, plan/arithmetic.compute_plan), "1" "on", "0" "off"."""
    value = os.environ.get("KVSPILL_SCALE_PAIRS")
    modes = {None: "auto", "": "auto", "1": "on", "0": "off"}
    if value not in modes:
        raise ValueError(f"KVSPILL_SCALE_PAIRS must be 0, 1 or unset, got {value!r}")
    return modes[value]


def q6k_split_on() -> bool:
    """A GGUF model's Q6_K weights on a GPU are kept in the split layout
    (kernels/gguf_formats.split_q6k_rows: the same bytes, the quants 16-byte aligned, which the
    tensor-core kernel copies with 16-byte loads) unless KVSPILL_Q6K_SPLIT=0 (gguf's layout). On an
    H200 the split made steps of 8 and 32 sequences 6-7% faster and, with its own one-token GEMV
    configs (kernels/gguf_gemv.Q6K_INT16X_SPLIT_CONFIGS), one-sequence steps 0.7% faster too
    (bench/results/2026-12-05-h200-q6k-split, call 6)."""
    return _binary_switch("Q6K_SPLIT", default=True)


def sparse_overlap_on() -> bool:
    """False where KVSPILL_SPARSE_OVERLAP=0: a sparse step selects and fetches each layer's cold
    blocks on the compute stream, after the gpu-resident attention, instead of beside it."""
    return switch_on("SPARSE_OVERLAP")


def sparse_hot_after() -> str:
    """KVSPILL_SPARSE_HOT_AFTER: where, in an overlapped sparse step, the attention over the gpu
    tier starts: "select" (the default: once the side stream has chosen the layer's blocks, so it
    runs beside their PCIe gather instead of taking the SMs the scoring needs), "keys" (once the
    blocks are scored) or "none" (at once, beside all of it). W3 128K on an H200: 54.1-54.6,
    53.1-53.4 and 51.6-51.8 tok/s."""
    value = os.environ.get("KVSPILL_SPARSE_HOT_AFTER", "select")
    if value not in ("keys", "select", "none"):
        raise ValueError(f"KVSPILL_SPARSE_HOT_AFTER must be keys, select or none, got {value!r}")
    return value

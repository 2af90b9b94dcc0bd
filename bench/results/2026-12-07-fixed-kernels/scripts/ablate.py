"""An upper bound, not a feature: profile_decode with some of a decode step's small kernels left
out (ABLATE=norm,silu,merge; the outputs are wrong, the timing of what is left is not). What a
step would gain if a fusion made a kernel free: the ceiling for folding the RMSNorms into the
GEMVs' epilogues (norm), the SiLU into the down projection (silu), the attention merge into the
split kernel (merge). Run: ABLATE=norm python3 ablate.py PROFILE_DECODE_ARGS."""

import os
import sys

import kvspill.kernels.decode_attention as decode_attention
import kvspill.kernels.quant_linear as quant_linear
import kvspill.model.layers as layers
from kvspill.bench import profile_decode

parts = {p for p in os.environ.get("ABLATE", "").split(",") if p}
unknown = parts - {"norm", "silu", "merge"}
assert not unknown, f"ABLATE knows norm, silu, merge, not {sorted(unknown)}"
if "norm" in parts:  # x passes on un-normalized, the residual is not added
    layers.fused_rms_norm = lambda x, weight, eps, residual=None: x if residual is None else (x, residual)
if "silu" in parts:  # the down projection reads the gate half as it is
    def _gate_half(x):
        return x[..., : x.shape[-1] // 2]

    layers.fused_silu_and_mul = _gate_half
    quant_linear.silu_and_mul = _gate_half
if "merge" in parts:  # o keeps what the buffer held
    decode_attention._merge_splits = lambda *args: None
print(f"ablated: {sorted(parts) or 'nothing'}", flush=True)
sys.exit(profile_decode.main(sys.argv[1:]))

"""profile_decode with this session's three decode changes undone (the before of the same call)."""
import sys
from kvspill.kernels import decode_attention, gguf_gemv
gguf_gemv.Q4K_ONE_TOKEN_CONFIG = None
gguf_gemv.FMA_CONFIG["Q6_K"] = (2048, 2, 1)
decode_attention.default_min_split_tokens = lambda head_dim: 128 if head_dim <= 64 else 256
from kvspill.bench import profile_decode
sys.exit(profile_decode.main(sys.argv[1:]))

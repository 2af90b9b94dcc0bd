"""profile_decode with this session's two kernel changes undone (the before of the same call)."""
import sys
from kvspill.kernels import gguf_gemv
gguf_gemv.Q4K_ONE_TOKEN_CONFIG = None
gguf_gemv.FMA_CONFIG["Q6_K"] = (2048, 2, 1)
from kvspill.bench import profile_decode
sys.exit(profile_decode.main(sys.argv[1:]))

"""profile_decode, with the fused-norm prototype when FUSE=1."""
import os, sys
sys.path.insert(0, os.path.dirname(__file__))
if os.environ.get("FUSE") == "1":
    import fused_norm  # noqa: F401
from kvspill.bench import profile_decode
sys.exit(profile_decode.main(sys.argv[1:]))

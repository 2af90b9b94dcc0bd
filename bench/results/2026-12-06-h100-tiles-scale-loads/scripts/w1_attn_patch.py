"""Patch a copy of kvspill (after ../../2026-12-06-h100-attn-8seq/scripts/attn_env_patch.py) so
batch-1 decode attention takes its shortest split from XMST (keys) and stage 1's programs a SM
from XPPS (an experiment, not a feature). `python w1_attn_patch.py TREE`."""

import sys
from pathlib import Path

path = Path(sys.argv[1]) / "kvspill/kernels/decode_attention.py"
s = path.read_text()
old = """    return max(16, 8192 // head_dim)
"""
new = """    import os
    return int(os.environ.get("XMST", max(16, 8192 // head_dim)))
"""
assert old in s
s = s.replace(old, new)
old = """    by_occupancy = (_PROGRAMS_PER_SM * num_sms)"""
new = """    import os
    by_occupancy = (int(os.environ.get("XPPS", _PROGRAMS_PER_SM)) * num_sms)"""
assert old in s
s = s.replace(old, new)
path.write_text(s)
print(f"patched {path}")

"""Patch a copy of kvspill so decode attention's stage 1 takes its split count and launch config
from the environment (an experiment, not a feature): XSPLITS (splits a sequence) where more than
one sequence decodes, XLAUNCH "BLOCK_N,WARPS,STAGES" from XMIN sequences (2 unless given).
`python attn_env_patch.py TREE`."""

import sys
from pathlib import Path

path = Path(sys.argv[1]) / "kvspill/kernels/decode_attention.py"
s = path.read_text()
old = """    if max_seq_len <= 0 or num_seqs <= 0:
        return 1
"""
new = """    if max_seq_len <= 0 or num_seqs <= 0:
        return 1
    import os
    if num_seqs > 1 and os.environ.get("XSPLITS"):
        return int(os.environ["XSPLITS"])
"""
assert old in s
s = s.replace(old, new)
old = """    if not is_cuda:
        return 16, 4, 1
"""
new = """    if not is_cuda:
        return 16, 4, 1
    import os
    if num_seqs >= int(os.environ.get("XMIN", "2")) and os.environ.get("XLAUNCH"):
        return tuple(int(v) for v in os.environ["XLAUNCH"].split(","))
"""
assert old in s
s = s.replace(old, new)
path.write_text(s)
print(f"patched {path}")

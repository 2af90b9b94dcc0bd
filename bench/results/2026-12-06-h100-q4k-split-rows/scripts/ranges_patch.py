"""A copy of kvspill/ (argv[1]) whose tensor-core kernels (gguf_mma: Q4_K / Q5_K / Q4_1 and Q6_K)
give split s of SPLIT_K the contiguous super-blocks [s * n // SPLIT_K, (s + 1) * n // SPLIT_K)
instead of s, s + SPLIT_K, ...: each program walks consecutive 144-byte pieces of its rows."""

import sys
from pathlib import Path

path = Path(sys.argv[1]) / "kvspill" / "kernels" / "gguf_mma.py"
text = path.read_text()
old = "    for sb in range(_split_index(), num_blocks, SPLIT_K):\n"
new = ("    for sb in range((_split_index() * num_blocks) // SPLIT_K, ((_split_index() + 1) * num_blocks) // SPLIT_K):\n")
assert text.count(old) == 2, text.count(old)
path.write_text(text.replace(old, new))
print("patched", path)

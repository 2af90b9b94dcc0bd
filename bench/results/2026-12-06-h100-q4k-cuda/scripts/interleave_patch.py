"""Call 9: a copy of kvspill/ (argv[1]) whose Q4_K kernels read design d's layout (the GGUF
super-blocks and scale pairs of each 16-row tile side by side, q4k_mma_cuda.interleave_rows)
instead of gguf's rows: the words-form tensor-core kernel (gguf_mma, gguf_mma_words) and the
one-token int16-x GEMV's lanes (gguf_gemv_offset, gguf_gemv_int16x). Only the address arithmetic
changes; the copy serves Q4_K only (other types sharing the lanes would read wrongly)."""

import sys
from pathlib import Path

root = Path(sys.argv[1]) / "kvspill" / "kernels"
EDITS = {
    "gguf_mma.py": [
        ("    row_ptr = w_ptr + _read_rows(n, rows) * stride_w\n    acc = tl.zeros((BLOCK_N, T_PAD), dtype=tl.float32)\n"
         "    acc2 = tl.zeros((BLOCK_N, T_PAD), dtype=tl.float32)\n    for sb in range(_split_index(), num_blocks, SPLIT_K):\n"
         "        base = row_ptr + sb * (160 if Q41 else 176 if Q5 else 144)\n",
         "    rr = _read_rows(n, rows)\n    row_ptr = w_ptr + (rr // 16) * (16 * stride_w) + (rr % 16) * 144\n"
         "    acc = tl.zeros((BLOCK_N, T_PAD), dtype=tl.float32)\n    acc2 = tl.zeros((BLOCK_N, T_PAD), dtype=tl.float32)\n"
         "    for sb in range(_split_index(), num_blocks, SPLIT_K):\n        base = row_ptr + sb * 2304\n"),
        ("                pairs_ptr + _read_rows(n, rows) * (num_blocks * 8),\n",
         "                pairs_ptr + (rr // 16) * (num_blocks * 128) + (rr % 16) * 8,\n"),
    ],
    "gguf_mma_words.py": [
        ("pairs = tl.load(pairs_rows[:, None] + sb * 8 + tl.arange(0, 8)[None, :])",
         "pairs = tl.load(pairs_rows[:, None] + sb * 128 + tl.arange(0, 8)[None, :])"),
    ],
    "gguf_gemv_offset.py": [
        ("    row = w_ptr + tl.where(n < rows, n, 0).to(tl.int64) * stride_w\n",
         "    nn = tl.where(n < rows, n, 0).to(tl.int64)\n    row = w_ptr + (nn // 16) * (16 * stride_w) + (nn % 16) * 144\n"),
    ],
    "gguf_gemv_int16x.py": [
        ("sb_bytes = tl.where((k + sb_w) < num_blocks, (k + sb_w) * (176 if Q5 else 144), 0)",
         "sb_bytes = tl.where((k + sb_w) < num_blocks, (k + sb_w) * 2304, 0)"),
    ],
}
for name, edits in EDITS.items():
    path = root / name
    text = path.read_text()
    for old, new in edits:
        assert text.count(old) == 1, f"{name}: {old[:60]!r} found {text.count(old)} times"
        text = text.replace(old, new)
    path.write_text(text)
print("patched", ", ".join(EDITS))

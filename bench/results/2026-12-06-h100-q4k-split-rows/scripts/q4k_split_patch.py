"""A copy of kvspill/ (argv[1]) whose Q4_K words form (tensor cores, scale pairs) and one-token
int16-x GEMV read split Q4_K rows (`split_q4k`): each row's super-blocks' 128-byte quants first,
then their 16-byte headers (d, dmin, scales), the same bytes. A row's quants then start a 128-byte
line a super-block (rows of 2,304 / 8,064 bytes keep 128-byte alignment), where gguf's put every
128-byte run 16 bytes into a super-block across two lines. Q4_K only, no Q5_K.
argv[2] G (optional, 8 or 16): the row in groups of G super-blocks, each group's quants then its
headers (G * 144 bytes, 128-byte aligned), so a header lies within 1-2 KB of its quants; the row's
super-blocks a multiple of G; -1: gguf's rows (no layout change, only argv[3]).
argv[3:] "load16": the int16-x GEMV loads a lane's 4 quant words as one 16-byte load instead of
two 8-byte ones (ptxas merges those on gguf's rows, not on split ones); "hdrptr": the header through
a pointer of its own a row (calls 2-7) instead of a register offset from the quants' (call 8);
"prefetch" (prepared, not run): each K step of the int16-x GEMV first asks L2 for its lanes' quant
and header lines (`prefetch.global.L2`), since ptxas issues the split rows' loads 100-200
instructions later than gguf's (`regs.sh`: the median load of (4096, 8, 4) at 439 against 217)."""

import sys
from pathlib import Path

root = Path(sys.argv[1]) / "kvspill" / "kernels"
G = int(sys.argv[2]) if len(sys.argv) > 2 else 0
if G:
    QS = f"(sb // {G}) * {G * 144} + (sb % {G}) * 128"
    # the header in words from `words` (the quants less 16 bytes): a register offset from the same
    # pointer, as gguf's rows have it (a second pointer a row held 31 more registers, call 7)
    HDR_WORDS = f"{G * 32 + 4} - (sb % {G}) * 28"
else:
    QS, HDR_WORDS = "sb * 128", "num_blocks * 32 - sb * 28 + 4"
HDR_BYTES = f"(sb // {G}) * {G * 144} + {G * 128} + (sb % {G}) * 16" if G else "num_blocks * 128 + sb * 16"
if "hdrptr" in sys.argv[3:]:
    HDR_PTR = f"(row + {HDR_BYTES}).to(tl.pointer_type(tl.int32))"
else:
    HDR_PTR = f"words + ({HDR_WORDS})"
EDITS = {
    "gguf_mma.py": [
        ("        base = row_ptr + sb * (160 if Q41 else 176 if Q5 else 144)\n",
         f"        base = row_ptr + {QS} - 16  # the words form reads base + 16: the quants\n"),
    ],
    "gguf_gemv_int16x.py": [
        ("        sb_bytes = tl.where((k + sb_w) < num_blocks, (k + sb_w) * (176 if Q5 else 144), 0)\n"
         "        words = (row + sb_bytes).to(tl.pointer_type(tl.int32))\n",
         "        sb = tl.where((k + sb_w) < num_blocks, k + sb_w, 0)\n"
         f"        words = (row + {QS} - 16).to(tl.pointer_type(tl.int32))\n"
         f"        hdr = {HDR_PTR}\n"),
        ("        acc += _q4k_int16x_step(words, g, hh,", "        acc += _q4k_int16x_step(words, hdr, g, hh,"),
        ("            acc2 += _q4k_int16x_step(words, g, hh,", "            acc2 += _q4k_int16x_step(words, hdr, g, hh,"),
        ("def _q4k_int16x_step(\n    words,\n", "def _q4k_int16x_step(\n    words,\n    hdr,\n"),
        ("    h0, h1, h2, h3 = _split4(tl.load(words + tl.arange(0, 4)[None, :]))\n    sc_lo, sc_hi, mn_lo, mn_hi = _q4k_decode(h0, h1, h2, h3, 16 * (g % 2), g < 2)\n    xl0",
         "    h0, h1, h2, h3 = _split4(tl.load(hdr + tl.arange(0, 4)[None, :]))\n    sc_lo, sc_hi, mn_lo, mn_hi = _q4k_decode(h0, h1, h2, h3, 16 * (g % 2), g < 2)\n    xl0"),
    ],
}
LOAD16 = [
    ("    i_lo, i_hi = _dp2a_step(\n        i_lo, i_hi, q_words, qh_words, 2 * g, xl0, xh0, inv_lo, inv_hi, BLOCK_N, KL, USE_ASM, Q5\n    )\n"
     "    i_lo, i_hi = _dp2a_step(\n        i_lo, i_hi, q_words + 2, qh_words + 2, 2 * g, xl1, xh1, inv_lo, inv_hi, BLOCK_N, KL, USE_ASM, Q5\n    )\n",
     "    quad = tl.arange(0, 4)[None, :]\n"
     "    qw4 = tl.load(words + 4 + g * 8 + hh * 4 + quad)  # one 16-byte load of the lane's 4 words\n"
     "    qa, qb = tl.split(tl.permute(tl.reshape(qw4, (BLOCK_N * KL, 2, 2)), (0, 2, 1)))\n"
     "    i_lo, i_hi = _dp2a_words(i_lo, i_hi, qa, xl0, xh0, inv_lo, inv_hi, BLOCK_N, KL, USE_ASM)\n"
     "    i_lo, i_hi = _dp2a_words(i_lo, i_hi, qb, xl1, xh1, inv_lo, inv_hi, BLOCK_N, KL, USE_ASM)\n"),
    ("@triton.jit\ndef _q4k_lane_part(",
     "@triton.jit\ndef _dp2a_words(i_lo, i_hi, qw, x_lo, x_hi, inv_lo, inv_hi, BLOCK_N: tl.constexpr, KL: tl.constexpr, USE_ASM: tl.constexpr):\n"
     "    qw = tl.reshape(qw, (BLOCK_N, KL, 2))\n"
     "    a_lo, b_lo = _int16_pairs(x_lo, inv_lo, KL, USE_ASM)\n"
     "    a_hi, b_hi = _int16_pairs(x_hi, inv_hi, KL, USE_ASM)\n"
     "    return _dp2a_planes(i_lo, i_hi, qw & 0x0F0F0F0F, qw & -0x0F0F0F10, a_lo, b_lo, a_hi, b_hi, BLOCK_N, KL, USE_ASM)\n\n\n"
     "@triton.jit\ndef _q4k_lane_part("),
]
if G < 0:
    EDITS = {"gguf_gemv_int16x.py": []}
if "load16" in sys.argv[3:]:
    EDITS["gguf_gemv_int16x.py"] += LOAD16
HDR_LINE = "words" if G < 0 else "hdr"  # gguf's rows: the header starts the super-block
PREFETCH = [
    ("from kvspill.kernels.pdl import LANE_PREFETCH_LINES, prefetch_rows_then_wait",
     "from kvspill.kernels.pdl import LANE_PREFETCH_LINES, prefetch_lines, prefetch_rows_then_wait"),
    ("    values they meet (`x_ptrs` [KL, 8] at the first 8) -> the lane's [BLOCK_N, KL] share of the output.\"\"\"\n",
     "    values they meet (`x_ptrs` [KL, 8] at the first 8) -> the lane's [BLOCK_N, KL] share of the output.\"\"\"\n"
     "    if USE_ASM:  # the GPU (Triton's interpreter runs no asm)\n"
     "        prefetch_lines((words + 4 + g * 8 + hh * 4).to(tl.pointer_type(tl.int8)))\n"
     f"        prefetch_lines({HDR_LINE}.to(tl.pointer_type(tl.int8)))\n"),
]
if "prefetch" in sys.argv[3:]:
    EDITS["gguf_gemv_int16x.py"] += PREFETCH
for name, edits in EDITS.items():
    path = root / name
    text = path.read_text()
    for old, new in edits:
        assert text.count(old) == 1, f"{name}: {old[:70]!r} found {text.count(old)} times"
        text = text.replace(old, new)
    path.write_text(text)
print("patched", ", ".join(EDITS), "G", G)

"""Patch a copy of kvspill so the words form runs one dot a super-block (Q4_K: K = 256) or a
half (Q6_K: K = 128) instead of 8 plane dots: the planes joined along K in registers (x's rows
are already in plane order), so Triton issues the wgmmas back to back with one wait at the end
instead of a wait after each plane's pair. `python one_dot_patch.py TREE q4|q6|both`."""

import sys
from pathlib import Path

tree, which = Path(sys.argv[1]), sys.argv[2]
path = tree / "kvspill/kernels/gguf_mma_words.py"
s = path.read_text()

DOT_PLANES = '''

@triton.jit
def _dot_planes(acc, planes, xt_ptr, blk, K: tl.constexpr, t, T_PAD: tl.constexpr, DOT_DTYPE: tl.constexpr):
    """acc += the 8 planes [BLOCK_N, K] joined along K (plane m's columns are K rows m K ... of
    x's block `blk` of 8 K rows, `words_x`'s order): one dot of depth 8 K."""
    p0, p1, p2, p3, p4, p5, p6, p7 = planes
    N: tl.constexpr = acc.shape[0]
    q0 = tl.reshape(p0, (N, K)).to(DOT_DTYPE)
    q1 = tl.reshape(p1, (N, K)).to(DOT_DTYPE)
    q2 = tl.reshape(p2, (N, K)).to(DOT_DTYPE)
    q3 = tl.reshape(p3, (N, K)).to(DOT_DTYPE)
    q4 = tl.reshape(p4, (N, K)).to(DOT_DTYPE)
    q5 = tl.reshape(p5, (N, K)).to(DOT_DTYPE)
    q6 = tl.reshape(p6, (N, K)).to(DOT_DTYPE)
    q7 = tl.reshape(p7, (N, K)).to(DOT_DTYPE)
    joined = tl.join(tl.join(tl.join(q0, q1), tl.join(q2, q3)), tl.join(tl.join(q4, q5), tl.join(q6, q7)))
    w = tl.reshape(tl.permute(joined, (0, 4, 3, 2, 1)), (N, 8 * K))  # column 32 m + c: plane m's c
    r = tl.arange(0, 8 * K)
    x = tl.load(xt_ptr + (blk * 8 * K + r)[:, None] * T_PAD + t[None, :])
    return tl.dot(w, x.to(DOT_DTYPE), acc, input_precision="ieee")
'''

anchor = "\n\n@triton.jit\ndef _dot_plane_pair("
assert anchor in s
s = s.replace(anchor, DOT_PLANES + anchor, 1)
if which in ("q4", "both"):
    old = """    acc, acc2 = _dot_plane_pair(acc, acc2, p0, p1, xt_ptr, sb * 8 + 0, 32, t, T_PAD, DOT_DTYPE, TWO_ACC)
    acc, acc2 = _dot_plane_pair(acc, acc2, p2, p3, xt_ptr, sb * 8 + 2, 32, t, T_PAD, DOT_DTYPE, TWO_ACC)
    acc, acc2 = _dot_plane_pair(acc, acc2, p4, p5, xt_ptr, sb * 8 + 4, 32, t, T_PAD, DOT_DTYPE, TWO_ACC)
    return _dot_plane_pair(acc, acc2, p6, p7, xt_ptr, sb * 8 + 6, 32, t, T_PAD, DOT_DTYPE, TWO_ACC)"""
    new = """    planes = (p0, p1, p2, p3, p4, p5, p6, p7)
    return _dot_planes(acc, planes, xt_ptr, sb, 32, t, T_PAD, DOT_DTYPE), acc2"""
    assert old in s
    s = s.replace(old, new)
if which in ("q6", "both"):
    old = """    acc, acc2 = _dot_plane_pair(acc, acc2, w0, w1, xt_ptr, first + 0, 16, t, T_PAD, DOT_DTYPE, TWO_ACC)
    acc, acc2 = _dot_plane_pair(acc, acc2, w2, w3, xt_ptr, first + 2, 16, t, T_PAD, DOT_DTYPE, TWO_ACC)
    acc, acc2 = _dot_plane_pair(acc, acc2, w4, w5, xt_ptr, first + 4, 16, t, T_PAD, DOT_DTYPE, TWO_ACC)
    return _dot_plane_pair(acc, acc2, w6, w7, xt_ptr, first + 6, 16, t, T_PAD, DOT_DTYPE, TWO_ACC)"""
    new = """    planes = (w0, w1, w2, w3, w4, w5, w6, w7)
    return _dot_planes(acc, planes, xt_ptr, sb * 2 + half, 16, t, T_PAD, DOT_DTYPE), acc2"""
    assert old in s
    s = s.replace(old, new)
path.write_text(s)
print(f"patched {path} ({which})")

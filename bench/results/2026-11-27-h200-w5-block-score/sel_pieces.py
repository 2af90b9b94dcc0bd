"""Dev only: the selection kernels' pieces timed alone (CUDA graphs), at 8K and 64K blocks."""
import json, torch, triton
import kvspill.kernels.block_select as bs
from kvspill.kernels.sparse_kernels import ranking_keys

def timed(fn, reps=32):
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3): fn()
    torch.cuda.current_stream().wait_stream(s); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps): fn()
    g.replay(); torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(5): g.replay()
    b.record(); torch.cuda.synchronize()
    return a.elapsed_time(b) / (5 * reps) * 1000  # us per call


for H, n, B in [(8, 8192, 256), (8, 65536, 256), (8, 32768, 256)]:
    g = torch.Generator(device="cuda").manual_seed(n + B)
    keys = ranking_keys(torch.randn(H, n, device="cuda", generator=g))
    R = bs._REGISTER_BLOCKS
    bp = triton.next_power_of_2(B)
    nc = triton.cdiv(n, R)
    rows = keys
    row = {"blocks": n, "budget": B}
    if nc > 1:
        rows = torch.empty((H, nc * B), dtype=torch.int64, device="cuda")
        f = lambda: bs._chunk_top_kernel[(H, nc)](keys, rows, n, B, NP=R, BP=bp, num_warps=8)
        row["chunk_us"] = round(timed(f), 1)
    m = rows.shape[1]
    np_ = triton.next_power_of_2(m)
    best = torch.full((n,), B * H, dtype=torch.int32, device="cuda")
    top = torch.empty((H, bp), dtype=torch.int64, device="cuda")
    ranks = torch.empty((H, bp), dtype=torch.int32, device="cuda")
    out = torch.empty(B, dtype=torch.int64, device="cuda")
    row["fill_us"] = round(timed(lambda: best.fill_(B * H)), 1)
    f = lambda: bs._head_top_kernel[(H,)](rows, best, top, ranks, n, m, B, NP=np_, BP=bp, RB=32, SINGLE=True,
                                          RANK_BY_SORT=False, num_warps=bs._warps(max(np_, bp)))
    row["head_us"] = round(timed(f), 1)
    snap = best.clone()
    if n <= R:
        f = lambda: bs._union_kernel[(1,)](best, out, n, B, H, NP=n, LOG_BP=bp.bit_length() - 1, num_warps=8)
    else:
        f = lambda: bs._union_entries_kernel[(1,)](best, top, ranks, out, n, B, H, KVH=H, BP=bp,
                                                   LOG_BP=bp.bit_length() - 1, num_warps=8)
    row["union_us"] = round(timed(f), 1)
    row["total_us"] = round(timed(lambda: bs.select_top_blocks(keys, B)), 1)
    print(json.dumps(row), flush=True)

"""Dev only: block selection, torch (before) vs Triton kernels (after), CUDA-graph timed, equal results."""
import json, sys, torch
from kvspill.kernels.block_select import select_top_blocks
from kvspill.kernels.sparse_kernels import ranking_keys

def old_select(keys, B, positions):
    H, n = keys.shape
    if B <= 512:
        tk, top = keys.topk(B, dim=1, sorted=False)
        ranks = (tk[:, None, :] > tk[:, :, None]).sum(dim=2)
    else:
        top = keys.topk(B, dim=1).indices
        ranks = positions[:B].expand(H, B)
    best = torch.full((n,), B, dtype=torch.int64, device=keys.device)
    best.scatter_reduce_(0, top.reshape(-1), ranks.reshape(-1), reduce="amin")
    return (best * n + positions).topk(B, largest=False, sorted=False).indices.sort().values

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

for H, n, B in [(8, 8192, 256), (8, 8192, 1024), (8, 65536, 256), (8, 16384, 256)]:
    g = torch.Generator(device="cuda").manual_seed(n + B)
    keys = ranking_keys(torch.randn(H, n, device="cuda", generator=g))
    pos = torch.arange(n, device="cuda")
    want = old_select(keys, B, pos)
    row = {"heads": H, "blocks": n, "budget": B, "torch_us": round(timed(lambda: old_select(keys, B, pos)), 1)}
    row["equal"] = torch.equal(want, select_top_blocks(keys, B))
    row["kernels_us"] = round(timed(lambda: select_top_blocks(keys, B)), 1)
    print(json.dumps(row), flush=True)

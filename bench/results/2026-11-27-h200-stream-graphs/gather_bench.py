"""Dev: the zero-copy gather alone and beside a GEMV loop on another stream, old grid vs loop grid."""
import os, time, torch, json
import kvspill.kernels.uva_gather as ug
dev = torch.device("cuda")
pool = torch.randn(4096, 2, 16, 8, 128, dtype=torch.bfloat16).pin_memory()
g = torch.Generator().manual_seed(0)
ids = torch.randperm(4096, generator=g)[:1024].to(dev)
dst = torch.empty(1024, 2, 16, 8, 128, dtype=torch.bfloat16, device=dev)
x = torch.randn(1, 4096, dtype=torch.bfloat16, device=dev)
w = torch.randn(4096, 14336, dtype=torch.bfloat16, device=dev)
sa, sb = torch.cuda.Stream(), torch.cuda.Stream()
def gathers(n=10):
    for _ in range(n): ug.gather_blocks(pool, ids, dst)
def gemvs(n=200):
    for _ in range(n): torch.mm(x, w)
def timed(fn):
    torch.cuda.synchronize(); t = time.perf_counter(); fn(); torch.cuda.synchronize(); return time.perf_counter() - t
nbytes = 10 * dst.numel() * 2
for cfg in [(0, 4096), (16, 16384), (32, 16384), (64, 16384), (132, 4096), (132, 16384), (264, 4096)]:
    os.environ["KVSPILL_GATHER_PROGRAMS"], os.environ["KVSPILL_GATHER_CHUNK"] = str(cfg[0]), str(cfg[1])
    gathers(2); gemvs(5)
    t_g = timed(gathers); t_m = timed(gemvs)
    def both():
        with torch.cuda.stream(sa): gathers()
        with torch.cuda.stream(sb): gemvs()
    ea, eb = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t_b = timed(both)
    print(json.dumps({"programs": cfg[0], "chunk": cfg[1], "gather_gbs_alone": round(nbytes / t_g / 1e9, 1),
        "gemv_ms_alone": round(t_m * 1e3, 2), "gather_ms_alone": round(t_g * 1e3, 2), "both_ms": round(t_b * 1e3, 2),
        "sum_ms": round((t_g + t_m) * 1e3, 2)}), flush=True)

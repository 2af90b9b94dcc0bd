"""Session 25: block_keys launch shapes and select_top_blocks' register threshold at W5/W1 sizes,
timed under CUDA graphs (one launch per layer, 32 layers in a row, so nothing stays in L2 and no
Python launch cost counts). Every variant's output must equal the committed configuration's.
Writes the fastest equal configuration to argv[1]."""
import itertools, json, sys, time
import torch
import kvspill.kernels.sparse_kernels as sk
import kvspill.kernels.block_select as bsel

dev = torch.device("cuda")
torch.manual_seed(0)
T0 = time.time()


def graph_us(fns):
    """us per launch of the list of closures, replayed as one graph."""
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for f in fns[:2]:
            f()
    torch.cuda.current_stream().wait_stream(s); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for f in fns:
            f()
    g.replay(); torch.cuda.synchronize()
    best = 1e9
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); torch.cuda.synchronize()
        best = min(best, a.elapsed_time(b))
    return best / len(fns) * 1e3


# (name, layers, kvh, head_dim, heads, tier blocks, cold blocks n)
SHAPES = [("W5 bs16 128K", 32, 8, 128, 32, 9216, 5545), ("W3 bs16 512K", 32, 8, 128, 32, 34000, 30000),
          ("W1 bs16 1M", 16, 8, 64, 32, 66000, 62000)]
cases = {}
for name, L, KVH, D, H, tb, n in SHAPES:
    summ = torch.randn(tb, L, 2, KVH, D, device=dev, dtype=torch.bfloat16)
    summ[:, :, 1] = summ[:, :, 0] + summ[:, :, 1].abs()
    ids = torch.randperm(tb, device=dev)[:n].contiguous()
    tiers = torch.full((n,), sk.TIER_CPU, dtype=torch.int64, device=dev)
    qs = [torch.randn(H, D, device=dev, dtype=torch.bfloat16) for _ in range(L)]
    cases[name] = (qs, [summ[:, l] for l in range(L)], tiers, ids, torch.tensor(n - 3, device=dev))


def keys_fns(case):
    qs, views, tiers, ids, nv = case
    return [lambda q=q, v=v: sk.block_keys(q, v, None, tiers, ids, nv) for q, v in zip(qs, views)]


base_cfg = (sk._BLOCKS_PER_PROGRAM, sk._KEYS_HEADS_PER_PROGRAM, sk._KEYS_WARPS)
ref = {c: [f() for f in keys_fns(cases[c])[:3]] for c in cases}
res = {}
for bn, hp, w in itertools.product([8, 16, 32, 64], [1, 2, 8], [2, 4, 8]):
    if time.time() - T0 > 200:
        print("keys sweep: out of time"); break
    sk._BLOCKS_PER_PROGRAM, sk._KEYS_HEADS_PER_PROGRAM, sk._KEYS_WARPS = bn, hp, w
    ok, per = True, []
    try:
        for c in cases:
            fns = keys_fns(cases[c])
            ok &= all(torch.equal(f(), r) for f, r in zip(fns, ref[c]))
            per.append(round(graph_us(fns), 1))
    except Exception as exc:  # noqa: BLE001
        print("  failed", bn, hp, w, str(exc)[:200]); continue
    res[(bn, hp, w)] = (per, ok)
    print(f"block_keys BN {bn:3d} heads {hp} warps {w}: {per} us  equal={ok}", flush=True)
sk._BLOCKS_PER_PROGRAM, sk._KEYS_HEADS_PER_PROGRAM, sk._KEYS_WARPS = base_cfg
# pick by the W5 shape, reject any that is slower than the committed one on another shape
base = res[base_cfg][0]
good = [k for k, (per, ok) in res.items() if ok and all(p <= b * 1.02 for p, b in zip(per, base))]
best_keys = min(good, key=lambda k: res[k][0][0])
print("block_keys committed", base_cfg, base, "-> best", best_keys, res[best_keys][0])

sel_res = {}
for name, n, budget, regs in (("W5 bs16 128K", 5545, 256, [512, 1024, 2048, 4096, 8192]),
                              ("W1 bs16 1M", 62000, 256, [2048, 4096, 8192, 16384])):
    keys = [sk.ranking_keys(torch.randn(8, n, device=dev)) for _ in range(32)]
    want = [bsel.select_top_blocks(k, budget) for k in keys]
    for reg in regs:
        fns = [lambda k=k, reg=reg: bsel.select_top_blocks(k, budget, reg) for k in keys]
        try:
            ok = all(torch.equal(f(), w_) for f, w_ in zip(fns, want))
            us = graph_us(fns)
        except Exception as exc:  # noqa: BLE001
            print("  failed", name, reg, str(exc)[:200]); continue
        sel_res[(name, reg)] = (us, ok)
        print(f"select {name} register_blocks {reg}: {us:.1f} us  equal={ok}", flush=True)
json.dump(dict(keys=best_keys, sel={f"{k[0]}|{k[1]}": v for k, v in sel_res.items()}), open(sys.argv[1], "w"))
print(f"micro done in {time.time() - T0:.0f} s")

"""Session 24: block_keys launch shapes and select_top_blocks thresholds at W5/W1 sizes on the GPU.
Every variant's output must equal the current configuration's bit for bit. Writes the fastest to argv[1]."""
import itertools, json, sys
import torch
import kvspill.kernels.sparse_kernels as sk
import kvspill.kernels.block_select as bsel

dev = torch.device("cuda")
torch.manual_seed(0)
L, KVH, D, H = 32, 8, 128, 32


def timeit(fn, iters=200):
    fn(); torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(iters):
        fn()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / iters * 1e3  # us


cases = {}  # name -> (q, layer view, tiers, ids)
for name, tier_blocks, n in (("bs8-128K", 18432, 12241), ("bs16-128K", 9216, 5545), ("bs16-512K", 40960, 30000)):
    summ = torch.randn(tier_blocks, L, 2, KVH, D, device=dev, dtype=torch.bfloat16)
    summ[:, :, 1] = summ[:, :, 0] + summ[:, :, 1].abs()
    view = summ[:, 7]
    ids = torch.randperm(tier_blocks, device=dev)[:n].contiguous()
    tiers = torch.full((n,), sk.TIER_CPU, dtype=torch.int64, device=dev)
    q = torch.randn(H, D, device=dev, dtype=torch.bfloat16)
    cases[name] = (q, view, tiers, ids)

keys_cfgs = list(itertools.product([16, 32, 64], [1, 2, 8], [2, 4, 8]))
ref = {c: sk.block_keys(*cases[c][:2], None, *cases[c][2:]) for c in cases}
res = {}
for bn, hp, w in keys_cfgs:
    sk._BLOCKS_PER_PROGRAM, sk._KEYS_HEADS_PER_PROGRAM, sk._KEYS_WARPS = bn, hp, w
    ok, tot, per = True, 0.0, []
    for c, (q, view, tiers, ids) in cases.items():
        out = sk.block_keys(q, view, None, tiers, ids)
        ok &= bool(torch.equal(out, ref[c]))
        us = timeit(lambda: sk.block_keys(q, view, None, tiers, ids))
        per.append(round(us, 1)); tot += us
    res[(bn, hp, w)] = (tot, ok)
    print(f"block_keys BN {bn:3d} heads {hp} warps {w}: {per} us  equal={ok}")
sk._BLOCKS_PER_PROGRAM, sk._KEYS_HEADS_PER_PROGRAM, sk._KEYS_WARPS = 32, 1, 4
best_keys = min((v[0], k) for k, v in res.items() if v[1])[1]
print("block_keys baseline", round(res[(32, 1, 4)][0], 1), "best", best_keys, round(res[best_keys][0], 1))

sel_cases = {}
for name, n, b in (("bs8-128K", 12241, 512), ("bs16-128K", 5545, 256), ("bs16-512K", 30000, 256), ("bs16-1M-W1", 65536, 256), ("bs8-1M-W1", 131072, 512)):
    k = sk.ranking_keys(torch.randn(KVH, n, device=dev))
    sel_cases[name] = (k, b, bsel.select_top_blocks(k, b))
sres = {}
for reg, pair, regw in itertools.product([8192, 16384], [256, 512], [8, 16]):
    bsel._REGISTER_BLOCKS, bsel._PAIRWISE_RANK_MAX = reg, pair
    bsel._warps = (lambda np_, regw=regw: regw if np_ >= 16384 else (8 if np_ >= 4096 else 4))
    ok, tot, per = True, 0.0, []
    for c, (k, b, want) in sel_cases.items():
        try:
            got = bsel.select_top_blocks(k, b)
            ok &= bool(torch.equal(got, want))
            us = timeit(lambda: bsel.select_top_blocks(k, b))
        except Exception as exc:  # noqa: BLE001
            print("  failed", reg, pair, regw, c, str(exc)[:200]); ok = False; us = 1e9
        per.append(round(us, 1)); tot += us if c != "bs8-1M-W1" else 0
    sres[(reg, pair, regw)] = (tot, ok)
    print(f"select reg {reg} pair {pair} warps16k {regw}: {per} us  equal={ok}")
best_sel = min((v[0], k) for k, v in sres.items() if v[1])[1]
print("select baseline", round(sres[(8192, 512, 8)][0], 1), "best", best_sel, round(sres[best_sel][0], 1))
json.dump(dict(keys=best_keys, sel=best_sel), open(sys.argv[1], "w"))

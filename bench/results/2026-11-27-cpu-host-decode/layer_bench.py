import time, torch, numpy as np
from kvspill.kernels.decode_attention import paged_decode_attention_ref
from kvspill.runner.host_decode import DecodeParts, paged_decode_attention_host
# SmolLM2-135M: 30 layers, 9 heads, 3 kv heads, head_dim 64; one layer's pool view timed
for dtype in (torch.float32, torch.float16):
    for ctx in (8192, 32768):
        bs, L = 16, 2
        nb = ctx // bs + 1
        pool = torch.randn(nb, L, 2, bs, 3, 64).to(dtype)
        tables = torch.from_numpy(np.random.default_rng(0).permutation(nb)[None, :nb - 1]).to(torch.int32)
        lens = torch.tensor([ctx - 3])
        q = torch.randn(1, 9, 64).to(dtype)
        out = (torch.empty(1, 9, 64, dtype=dtype), torch.empty(1, 9))
        parts = DecodeParts.of(tables, lens, bs)
        def t(fn, n=20):
            fn(); best = 1e9
            for _ in range(n):
                s = time.perf_counter(); fn(); best = min(best, time.perf_counter() - s)
            return best
        a = t(lambda: paged_decode_attention_host(q, pool, 0, parts, 0.125, out))
        b = t(lambda: paged_decode_attention_ref(q, pool[:, 0], tables, lens, 0.125, out=out))
        gb = ctx * 3 * 64 * 2 * pool.element_size() / 1e9
        print(f"{dtype} ctx {ctx}: host kernel {a*1e3:.3f} ms ({gb/a:.1f} GB/s)  ref {b*1e3:.3f} ms ({gb/b:.1f} GB/s)  x{b/a:.1f}")

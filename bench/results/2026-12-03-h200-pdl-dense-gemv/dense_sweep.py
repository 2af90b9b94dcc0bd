"""bf16 one-token GEMV: torch (cuBLAS) vs kernels/fp8_gemv.dense_gemv over tile configs, PDL off/on.
Graph replays over weight copies (>= 256 MB a replay, past L2); us per call, GB/s of weight bytes."""
import itertools, json, os, sys
import torch
from kvspill.bench.kernels_gguf import ROTATE_BYTES, _bench_ms
from kvspill.kernels.fp8_gemv import GemvConfig, dense_gemv

SHAPES = {"1b_qkv": (3072, 2048), "1b_o": (2048, 2048), "1b_gate_up": (16384, 2048), "1b_down": (2048, 8192),
          "1b_lm_head": (128256, 2048), "8b_qkv": (6144, 4096), "8b_o": (4096, 4096), "8b_gate_up": (28672, 4096),
          "8b_down": (4096, 14336)}
CONFIGS = [GemvConfig(bn, bk, w, s) for bn, bk, w, s in itertools.product([4, 8, 16], [256, 512], [4], [3])
           if bn * bk <= 8192]


def timed(fn, ws, x):
    def step():
        for w in ws:
            fn(x, w)
    fn(x, ws[0])
    return _bench_ms(step) * 1e3 / len(ws)


rows = []
for name, (n, k) in SHAPES.items():
    nbytes = n * k * 2
    ws = [torch.randn((n, k), dtype=torch.bfloat16, device="cuda") * 0.02 for _ in range(max(2, -(-ROTATE_BYTES // nbytes)))]
    x = torch.randn((1, k), dtype=torch.bfloat16, device="cuda")
    ref = (x.float() @ ws[0].float().t())
    torch_us = timed(lambda a, w: torch.matmul(a, w.t()), ws, x)
    res = {}
    for pdl in ("0", "1"):
        os.environ["KVSPILL_PDL"] = pdl
        best = None
        for cfg in CONFIGS:
            got = dense_gemv(x, ws[0], config=cfg).float()
            err = float((got - ref).abs().max() / ref.abs().max())
            us = timed(lambda a, w, c=cfg: dense_gemv(a, w, config=c), ws, x)
            if best is None or us < best[1]:
                best = (cfg, us, err)
        res[pdl] = best
    row = dict(shape=name, n=n, k=k, torch_us=round(torch_us, 2), torch_gbs=round(nbytes / torch_us / 1e3),
               nopdl=(tuple(res["0"][0]), round(res["0"][1], 2), round(nbytes / res["0"][1] / 1e3)),
               pdl=(tuple(res["1"][0]), round(res["1"][1], 2), round(nbytes / res["1"][1] / 1e3)), err=res["1"][2])
    print(row, flush=True)
    rows.append(row)
    del ws
json.dump(rows, open(sys.argv[1], "w"), indent=1)

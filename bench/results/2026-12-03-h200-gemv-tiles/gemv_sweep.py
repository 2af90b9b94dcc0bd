"""One-token GEMV tiles (kernels/fp8_gemv) per shape, fp8 and bf16 weights, PDL on (as the engine
launches them): graph replays over weight copies past L2, us per call. Writes picks JSON:
{"fp8": {"N,K": [bn, bk, warps, stages]}, "bf16": {...}} with each shape's best and the default's us.
    python gemv_sweep.py OUT.json"""
import itertools, json, os, sys, time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import torch

SHAPES = {
    "fp8": {"8b_qkv": (6144, 4096), "8b_o": (4096, 4096), "8b_gate_up": (28672, 4096), "8b_down": (4096, 14336)},
    "bf16": {"1b_qkv": (3072, 2048), "1b_o": (2048, 2048), "1b_gate_up": (16384, 2048), "1b_down": (2048, 8192),
             "1b_lm_head": (128256, 2048), "8b_qkv": (6144, 4096), "8b_o": (4096, 4096),
             "8b_gate_up": (28672, 4096), "8b_down": (4096, 14336)},
}
TILES = [(4, 256), (4, 512), (4, 1024), (4, 2048), (8, 256), (8, 512), (8, 1024), (8, 2048),
         (16, 256), (16, 512), (16, 1024), (32, 256), (32, 512)]
CONFIGS = [(bn, bk, w, 3) for (bn, bk), w in itertools.product(TILES, (4, 8))]


def _call(kind, x, w, scale, cfg):
    from kvspill.kernels.fp8_gemv import GemvConfig, dense_gemv, fp8_gemv
    c = GemvConfig(*cfg)
    return fp8_gemv(x, w, scale, config=c) if kind == "fp8" else dense_gemv(x, w, config=c)


def _compile(job):
    kind, cfg = job
    os.environ["KVSPILL_PDL"] = "1"
    x = torch.randn(1, 512, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(64, 512, device="cuda").to(torch.float8_e4m3fn if kind == "fp8" else torch.bfloat16)
    _call(kind, x, w, torch.ones(64, device="cuda"), cfg)
    torch.cuda.synchronize()
    return 0


def main(out):
    from kvspill.bench.kernels_gguf import ROTATE_BYTES, _bench_ms
    from kvspill.kernels.fp8_gemv import gemv_config
    t0 = time.time()
    jobs = [(kind, cfg) for kind in SHAPES for cfg in CONFIGS]
    with ProcessPoolExecutor(12, mp_context=get_context("spawn")) as pool:
        list(pool.map(_compile, jobs))
    print(f"compiled {len(jobs)} in {time.time() - t0:.0f} s", flush=True)
    picks = {}
    for kind, shapes in SHAPES.items():
        picks[kind] = {}
        for name, (n, k) in shapes.items():
            dt = torch.float8_e4m3fn if kind == "fp8" else torch.bfloat16
            nbytes = n * k * (1 if kind == "fp8" else 2)
            ws = [(torch.randn(n, k, device="cuda") * 0.02).to(dt) for _ in range(max(2, -(-ROTATE_BYTES // nbytes)))]
            scale = torch.full((n,), 1e-3, device="cuda")
            x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)

            def timed(cfg):
                def step():
                    for w in ws:
                        _call(kind, x, w, scale, cfg)
                _call(kind, x, ws[0], scale, cfg)
                return _bench_ms(step) * 1e3 / len(ws)

            default = tuple(gemv_config(1, n, k))
            default_us = timed(default)
            res = sorted((timed(cfg), cfg) for cfg in CONFIGS)
            best_us, best = res[0]
            picks[kind][f"{n},{k}"] = {"best": best, "us": round(best_us, 2), "gbs": round(nbytes / best_us / 1e3),
                                       "default": default, "default_us": round(default_us, 2),
                                       "top5": [(c, round(u, 2)) for u, c in res[:5]]}
            print(kind, name, picks[kind][f"{n},{k}"], flush=True)
            del ws
    json.dump(picks, open(out, "w"), indent=1)
    print(f"sweep done in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main(sys.argv[1])

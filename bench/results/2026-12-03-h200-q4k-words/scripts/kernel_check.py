"""GPU: fused prologues vs the unfused chains at 1B / 8B shapes (bits), and per-op time in CUDA graphs."""
import json
import torch
from kvspill.kernels.fp8_gemv import dense_gemv, fp8_gemv, gemv_rms_norm, gemv_silu_mul
from kvspill.kernels.fp8_linear import quantize_weight_fp8
from kvspill.kernels.fused_ops import rms_norm, silu_and_mul

dev = "cuda"
g = torch.Generator(device=dev).manual_seed(0)
bf = torch.bfloat16


def rnd(*shape, s=1.0):
    return (torch.randn(*shape, device=dev, generator=g) * s)


def gemv(x, w):
    return dense_gemv(x, w[0]) if w[1] is None else fp8_gemv(x, w[0], w[1])


def timed(fn, reps=50):
    fn()
    torch.cuda.synchronize()
    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(reps):
                fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph.replay()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(10):
        graph.replay()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) * 1e3 / (10 * reps)


res = []
for name, hidden, inter, qkv in [("1b", 2048, 8192, 3072), ("8b", 4096, 14336, 6144)]:
    for kind in ("bf16", "fp8"):
        def W(n, k):
            w = rnd(n, k, s=0.02)
            return quantize_weight_fp8(w) if kind == "fp8" else (w.to(bf), None)
        wd, wgu, wq = W(hidden, inter), W(2 * inter, hidden), W(qkv, hidden)
        gu = rnd(1, 2 * inter, s=2).to(bf)
        a = gemv_silu_mul(gu, *wd)
        b = gemv(silu_and_mul(gu), wd)
        r = {"shape": name, "kind": kind, "silu_equal": torch.equal(a, b),
             "silu_maxdiff": (a.float() - b.float()).abs().max().item()}
        x, resid = rnd(1, hidden, s=3).to(bf), rnd(1, hidden, s=3).to(bf)
        nw = (1 + 0.2 * rnd(hidden)).to(bf)
        for pname, w in (("qkv", wq), ("gate_up", wgu)):
            r0 = resid.clone()
            a, nr = gemv_rms_norm(x, resid, nw, 1e-5, *w)
            h, rr = rms_norm(x, nw, 1e-5, resid.clone())
            b = gemv(h, w)
            r[f"rms_{pname}_equal"] = torch.equal(a, b)
            r[f"rms_{pname}_mismatch"] = int((a != b).sum())
            r[f"rms_{pname}_maxrel"] = ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()
            r[f"rms_{pname}_residual_equal"] = torch.equal(nr, rr) and torch.equal(resid, r0)
            a1, _ = gemv_rms_norm(x, None, nw, 1e-5, *w)
            r[f"rms_{pname}_first_equal"] = torch.equal(a1, gemv(rms_norm(x, nw, 1e-5), w))
        # time: unfused chain vs fused, per op (us)
        if __import__('os').environ.get('NO_TIMING'):
            print(json.dumps(r), flush=True)
            continue
        r["us_silu_down_unfused"] = timed(lambda: gemv(silu_and_mul(gu), wd))
        r["us_silu_down_fused"] = timed(lambda: gemv_silu_mul(gu, *wd))
        r["us_down_only"] = timed(lambda: gemv(gu[:, :inter], wd))
        for pname, w in (("qkv", wq), ("gate_up", wgu)):
            r[f"us_norm_{pname}_unfused"] = timed(lambda w=w: gemv(rms_norm(x, nw, 1e-5, resid.clone())[0], w))
            r[f"us_norm_{pname}_fused"] = timed(lambda w=w: gemv_rms_norm(x, resid, nw, 1e-5, *w))
            r[f"us_{pname}_only"] = timed(lambda w=w: gemv(x, w))
            r[f"us_clone"] = timed(lambda: resid.clone())
        res.append(r)
        print(json.dumps(r), flush=True)

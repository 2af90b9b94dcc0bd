"""Time kvspill_cpu_attend variants: python harness.py file.cpp [threads] [tokens] [dtype]"""
import ctypes, subprocess, sys, time, hashlib, os
import numpy as np, torch
sys.path.insert(0, os.getcwd())
from kvspill.kernels import cpu_attention as ca
from kvspill.plan.calibrate import measure_host_read_gbs

src = sys.argv[1]; threads = int(sys.argv[2]) if len(sys.argv) > 2 else 1
tokens = int(sys.argv[3]) if len(sys.argv) > 3 else 65536
dt = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp8": torch.float8_e4m3fn, "int8": torch.int8}[sys.argv[4] if len(sys.argv) > 4 else "bf16"]
key = hashlib.md5(open(src, "rb").read() + os.environ.get("XFLAGS", "").encode()).hexdigest()[:8]
so = f"/tmp/{os.path.basename(src)}.{key}.so"
if not os.path.exists(so):
    subprocess.run(["g++", *ca._FLAGS, *os.environ.get("XFLAGS","").split(), src, "-o", so], check=True)
lib = ctypes.CDLL(so); lib.kvspill_cpu_attend.restype = ctypes.c_int
ca.load_kernel = lambda: lib
H, KV, D, BS, L = 32, 8, 128, 16, 4
nb = tokens // BS
row = D + 4 if dt == torch.int8 else D
torch.manual_seed(0)
if dt == torch.int8:
    pool = torch.randint(-100, 100, (nb, L, 2, BS, KV, row), dtype=torch.int8)
    pool.view(torch.float32)[..., D // 4:] = 0.01
else:
    pool = (torch.randn(nb, L, 2, BS, KV, row) * 0.5).to(dt)
ids = np.random.default_rng(0).permutation(nb).astype(np.int64)
if "--hot" in sys.argv:  # the same 16 blocks again and again: L2-resident, compute-bound
    ids = np.tile(ids[:16], nb // 16)
parts = ca.CpuParts.single(ids, 0, 1)
q = torch.randn(1, H, D)
out = (torch.empty(1, H, D), torch.empty(1, H))
ref = (torch.empty(1, H, D), torch.empty(1, H))
layer = 1
nbytes = nb * 2 * BS * KV * row * pool.element_size()
ca.cpu_paged_attention(q, pool, layer, parts, D ** -0.5, out, num_threads=threads)
if tokens <= 65536:
    ca.cpu_paged_attention_ref(q, pool, layer, parts, D ** -0.5, ref)
    err = (out[0] - ref[0]).abs().max().item(), (out[1] - ref[1]).abs().max().item()
else:
    err = None
best = 1e9
for _ in range(int(os.environ.get("REPS", 15)) if tokens > 4096 else 200):
    t = time.perf_counter(); ca.cpu_paged_attention(q, pool, layer, parts, D ** -0.5, out, num_threads=threads); best = min(best, time.perf_counter() - t)
torch.set_num_threads(threads); read = measure_host_read_gbs() if "--read" in sys.argv else float("nan")
print(f"{os.path.basename(src)} {dt} thr={threads} tok={tokens}: {nbytes/best/1e9:.2f} GB/s  ({best*1e3:.2f} ms) read={read:.2f} err={err} load={os.getloadavg()[0]:.2f}")

"""Dev only: ways to get a zeroed pinned host buffer of N GiB, timed."""
import mmap, sys, time, threading
import numpy as np, torch
GIB = 2**30
n = int(float(sys.argv[1]) * GIB) if len(sys.argv) > 1 else 8 * GIB
print(open("/sys/kernel/mm/transparent_hugepage/enabled").read().strip(), open("/sys/kernel/mm/transparent_hugepage/defrag").read().strip())
cudart = torch.cuda.cudart()
torch.cuda.init()

def t(label, fn):
    s = time.perf_counter(); out = fn(); torch.cuda.synchronize(); print(f"{label:55s} {time.perf_counter()-s:6.2f} s", flush=True); return out

def touch(buf, threads=16):
    arr = np.frombuffer(buf, dtype=np.uint8)
    step = -(-len(arr) // threads)
    ths = [threading.Thread(target=lambda i=i: arr[i*step:(i+1)*step].fill(0)) for i in range(threads)]
    [x.start() for x in ths]; [x.join() for x in ths]

def register(buf):
    ptr = np.frombuffer(buf, dtype=np.uint8).ctypes.data
    err = cudart.cudaHostRegister(ptr, len(buf), 0)
    assert int(err) == 0, err
    return ptr

x = t("torch.zeros(pin_memory=True)", lambda: torch.zeros(n, dtype=torch.uint8, pin_memory=True)); del x
x = t("torch.empty(pin_memory=True) (cached block now)", lambda: torch.empty(n, dtype=torch.uint8, pin_memory=True)); del x
torch._C._host_emptyCache() if hasattr(torch._C, "_host_emptyCache") else None
for huge in (True, False):
    for threads in (16, 0):
        def go():
            m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            if huge: m.madvise(mmap.MADV_HUGEPAGE)
            if threads: touch(m, threads)
            p = register(m)
            return m, p
        m, p = t(f"mmap hugepage={huge} touch_threads={threads} + cudaHostRegister", go)
        # H2D speed check from it
        dst = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
        src = torch.frombuffer(m, dtype=torch.uint8, count=256 * 2**20)
        s = time.perf_counter()
        for _ in range(10): dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize(); print(f"   H2D {10*256/1024/(time.perf_counter()-s):.1f} GiB/s")
        cudart.cudaHostUnregister(p); del src; m.close()

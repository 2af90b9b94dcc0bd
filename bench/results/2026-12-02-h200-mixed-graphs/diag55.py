"""Issue 55 diagnostic: where the GPU memory goes when concurrent steps fail (one H200 call)."""
import json, logging, os, pickle, sys, time
import torch

OUT = os.environ.get("OUT", "/tmp/out")
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
from kvspill.engine import step_retry

dumped = {"n": 0}
orig_failed = step_retry.OomBackoff.failed


def failed(self, step_tokens):
    if dumped["n"] < 2:
        dumped["n"] += 1
        tag = f"oom{dumped['n']}"
        with open(f"{OUT}/{tag}_summary.txt", "w") as f:
            f.write(torch.cuda.memory_summary())
            f.write(f"\nstep_tokens={step_tokens}\nmem_get_info={torch.cuda.mem_get_info()}\n")
        if os.environ.get("DIAG_HISTORY"):
            with open(f"{OUT}/{tag}_snapshot.pickle", "wb") as f:
                pickle.dump(torch.cuda.memory._snapshot(), f)
        print("DUMPED", tag, flush=True)
    return orig_failed(self, step_tokens)


step_retry.OomBackoff.failed = failed

from kvspill.bench import concurrent_bench as cb

COMPILES = []


def _hook(*args, **kwargs):
    fn = kwargs.get("fn")
    name = getattr(fn, "name", None) or str(kwargs.get("repr", "?"))[:60]
    consts = kwargs.get("constants") or kwargs.get("compile", {}).get("constants", {})
    COMPILES.append((time.time(), name, str(consts)[:160]))
    return False


try:
    import triton

    if hasattr(triton, "knobs"):
        triton.knobs.runtime.jit_cache_hook = _hook
    else:
        from triton.runtime.jit import JITFunction

        JITFunction.cache_hook = _hook
    print("TRITON", triton.__version__, flush=True)
except Exception as e:  # noqa: BLE001
    print("no triton hook", e)

orig_run = cb.run_concurrent


def run_logged(engine, ctx, n, *a, **k):
    start = len(COMPILES)
    t0 = time.time()
    out = orig_run(engine, ctx, n, *a, **k)
    new = COMPILES[start:]
    print(f"RUN n={n} {time.time() - t0:.2f}s compiles={len(new)}", flush=True)
    for t, name, c in new[:12]:
        print(f"   +{t - t0:6.2f}s {name} {c}", flush=True)
    return out


cb.run_concurrent = run_logged

orig_setup = cb.setup_engine


def setup(*a, **k):
    if os.environ.get("DIAG_HISTORY"):
        torch.cuda.memory._record_memory_history(max_entries=200000)
    bench = orig_setup(*a, **k)
    pools = {}
    for seg in torch.cuda.memory._snapshot()["segments"]:
        pid = str(tuple(seg.get("segment_pool_id", (0, 0))))
        r, al = pools.get(pid, (0, 0))
        pools[pid] = (r + seg["total_size"] // 2**20, al + seg["allocated_size"] // 2**20)
    print("POOLS_MiB reserved/allocated", json.dumps(pools), flush=True)
    free, total = torch.cuda.mem_get_info()
    info = dict(
        allocated=torch.cuda.memory_allocated(), reserved=torch.cuda.memory_reserved(),
        max_allocated=torch.cuda.max_memory_allocated(), free=free, total=total,
        pool_bytes=bench.engine.bundle.storage.nbytes,
    )
    print("AFTER_SETUP", json.dumps(info), flush=True)
    with open(f"{OUT}/after_setup_summary.txt", "w") as f:
        f.write(torch.cuda.memory_summary())
    return bench


cb.setup_engine = setup
sys.exit(cb.main(sys.argv[1:]))

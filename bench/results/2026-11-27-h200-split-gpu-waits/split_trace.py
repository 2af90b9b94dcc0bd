"""Host timeline of the split path per layer (dev only): where a W3 128K split decode step goes."""
import sys, time, collections, json, os
import torch
from kvspill.kv import cold_attention as ca, cold_cpu as cc

T = collections.defaultdict(list)
cur = {}
_begin, _finish, _kl, _stream = ca.ColdStep.begin, ca.ColdStep.finish, cc.ColdCpuPath._kernel_layer, ca.ColdStep._stream_layer

def begin(self, layer_idx, q):
    cur.clear(); cur["begin"] = time.perf_counter()
    w = _begin(self, layer_idx, q); cur["begun"] = time.perf_counter(); return w
def kl(self, *a):
    cur["cpu0"] = time.perf_counter(); r = _kl(self, *a); cur["cpu1"] = time.perf_counter(); return r
def stream(self, *a):
    cur["s0"] = time.perf_counter(); r = _stream(self, *a); cur["s1"] = time.perf_counter(); return r
def finish(self, work):
    cur["finish"] = time.perf_counter()
    orig = [f.result for f in work.cpu_futures]
    r = _finish(self, work)
    cur["done"] = time.perf_counter()
    if "prev_done" in T and False: pass
    if work.q_cold.shape[0] == 1 and "cpu0" in cur:
        b = cur["begin"]
        for k in ("begun", "cpu0", "cpu1", "finish", "s0", "s1", "done"):
            if k in cur: T[k].append(cur[k] - b)
        if T.get("_last") is not None: T["gap_prev_done_to_begin"].append(b - T["_last"][0])
        T["_last"] = [cur["done"]]
    return r
ca.ColdStep.begin, ca.ColdStep.finish, cc.ColdCpuPath._kernel_layer, ca.ColdStep._stream_layer = begin, finish, kl, stream

from kvspill.bench.engine_bench import main
rc = main(sys.argv[1:])
T.pop("_last", None)
n = 32 * 20
print({k: round(sum(v[-n:]) / len(v[-n:]) * 1e3, 3) for k, v in T.items() if v}, "ms after begin (gap: ms from the previous layer's done)")

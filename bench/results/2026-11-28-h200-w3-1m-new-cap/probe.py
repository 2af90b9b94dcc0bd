"""Dev only: eval_drv.py (s19) with the engine's start-up memory printed at three points: the plan's
measurement (_measure), the early cap and the late cap (cap_allocator). Why does an eval's teacher-forced
reference engine start 0.14-0.19 GiB over its plan (2026-11-28)? usage: as eval_drv.py."""
import logging, runpy, sys
import torch
import kvspill.engine_setup as es
import kvspill.engine_checks as ec

logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
G = 2**30


def mem(tag, extra=""):
    if not torch.cuda.is_available():
        print(f"[probe] {tag}: (no CUDA) {extra}", flush=True)
        return
    i = torch.cuda.current_device()
    free, total = torch.cuda.mem_get_info(i)
    own, n = ec._nvml_process_memory(i)
    print(f"[probe] {tag}: allocated {torch.cuda.memory_allocated(i)/G:.3f} reserved {torch.cuda.memory_reserved(i)/G:.3f} "
          f"nvml-own {own/G if own else -1:.3f} card-used {(total-free)/G:.3f} procs {n} {extra}", flush=True)


orig_measure, orig_cap, orig_rt = es._measure, es.cap_allocator, es.runtime_bytes_beside


def measure(config, loaded, layout, device, allocated_before):
    mem("measure:in", f"allocated_before {allocated_before/G:.3f}")
    m = orig_measure(config, loaded, layout, device, allocated_before)
    mem("measure:out", f"-> {m}")
    return m


def runtime(config, device, loaded_bytes):
    r = orig_rt(config, device, loaded_bytes)
    mem("runtime_bytes_beside", f"loaded {loaded_bytes/G:.3f} -> runtime {r/G:.3f}")
    return r


def cap(config, device, leave_runtime=False, step_bytes=0):
    mem(f"cap(leave_runtime={leave_runtime})", f"step {step_bytes/G:.3f} budget {(config.vram_budget_bytes or 0)/G:.3f}")
    return orig_cap(config, device, leave_runtime=leave_runtime, step_bytes=step_bytes)


es._measure, es.cap_allocator, es.runtime_bytes_beside = measure, cap, runtime
driver = __file__.replace("s20/probe.py", "s19/eval_drv.py")
sys.argv = [driver] + sys.argv[1:]
runpy.run_path(driver, run_name="__main__")

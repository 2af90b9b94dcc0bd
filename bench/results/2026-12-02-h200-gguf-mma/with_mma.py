"""Run a kvspill module with the tensor-core configs picked by mma_sweep.py: with_mma.py JSON|off module args..."""
import json, runpy, sys
from kvspill.kernels import gguf_mma
src, module, args = sys.argv[1], sys.argv[2], sys.argv[3:]
if src != "off":
    for key, pick in json.load(open(src)).items():
        qtype, t = key.split(":")
        if pick["step_us"] < pick["base_step_us"]:
            gguf_mma.MMA_CONFIGS[(qtype, int(t))] = gguf_mma.MmaConfig(**pick["cfg"])
print("MMA_CONFIGS", gguf_mma.MMA_CONFIGS, flush=True)
sys.argv = [module] + args
runpy.run_module(module, run_name="__main__")

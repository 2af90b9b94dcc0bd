"""Run a module with the one-token GEMV tiles of a picks JSON (gemv_sweep.py): with_picks.py PICKS KIND MODULE args"""
import json, runpy, sys
from kvspill.kernels import fp8_gemv

picks = {tuple(map(int, key.split(","))): v["best"] for key, v in json.load(open(sys.argv[1]))[sys.argv[2]].items()}
default = fp8_gemv.gemv_config


def gemv_config(num_tokens, n, k):
    if num_tokens == 1 and (n, k) in picks:
        return fp8_gemv.GemvConfig(*picks[(n, k)])
    return default(num_tokens, n, k)


fp8_gemv.gemv_config = gemv_config
sys.argv = [sys.argv[3]] + sys.argv[4:]
runpy.run_module(sys.argv[0], run_name="__main__")

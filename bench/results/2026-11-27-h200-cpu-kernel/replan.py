#!/usr/bin/env python3
# Usage (repo root): python bench/results/2026-11-27-h200-cpu-kernel/replan.py CALIBRATE.txt:BENCH.jsonl ...
"""Recompute the plan of each committed bench row with the current code and that call's calibration."""
import json, re, sys
from dataclasses import replace
from kvspill.config import EngineConfig
from kvspill.plan import Bandwidths
from kvspill.plan.startup import startup_plan

GIB = 1 << 30
def calib(path):
    vals = {}
    for line in open(path):
        m = re.match(r"\s+(\w+)\s+([\d.]+)( ms)?$", line.rstrip())
        if m:
            k, v = m.group(1), float(m.group(2))
            if k == "cpu_attn_layer": vals["cpu_attn_layer_s"] = v / 1e3
            else: vals[k] = v
    return Bandwidths(measured_at="2026-11-27T16:00:00+00:00", gpu_name="NVIDIA H200", gpu_total_bytes=150754820096, **vals)

for cal, bench in [a.split(":") for a in sys.argv[1:]]:
    bw = calib(cal)
    for line in open(bench):
        d = json.loads(line)
        mode = d["mode"]
        shape = d["shape"]
        kvd = "fp8" if "kv-fp8" in mode else "auto"
        att = "cpu" if "attention-cpu" in mode else "auto"
        cold = "split" if "split" in mode else "cpu" if "tiers-cpu" in mode else "stream" if "stream" in mode else "auto"
        threads = 14 if "-t14" in mode else None
        config = EngineConfig(model=f"random:{shape}", max_model_len=d["ctx"], max_num_batched_tokens=d["chunk"], max_num_seqs=8,
            vram_budget_bytes=int(d["cap_gib"] * GIB), enable_prefix_caching=False, skip_tokenizer_init=True,
            cpu_kv_budget_bytes=int(d["cpu_kv_gib"] * GIB), cold_attention=cold, kv_cache_dtype=kvd, attention=att,
            cpu_attention_threads=threads)
        p = startup_plan(config, 150754820096, "NVIDIA H200", bw)
        t = p.plan.decode_tok_s
        print(f"{bench.split('/')[-1][:6]} {mode:34s} {d['ctx']:7d} measured {d['decode_tok_s']:6.2f} plan_then {d.get('plan_decode_tok_s')} plan_now {t:6.2f} ratio {t / d['decode_tok_s']:.2f}")

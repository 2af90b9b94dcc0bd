"""Dev only: `kvspill eval` without the CLI's packages (typer/fastapi are not on the GPU image).
usage: eval_drv.py MODEL OUT LABEL LENGTHS(comma) HOT_TOKENS SAMPLES TF(0/1) [key=value ...]"""
import json, sys, time
from kvspill.eval.runner import EvalSpec, hot_kv_kwargs, run_eval
from kvspill.eval.report import write_report
from kvspill.eval.tasks import TASKS

model, out, label, lengths, hot, samples, tf, *extra = sys.argv[1:]
lengths = [int(x) for x in lengths.split(",")]
kw = {"max_model_len": max(lengths), "device": "cuda"}
if int(hot):
    kw.update(hot_kv_kwargs(int(hot), max(lengths)))
for item in extra:
    k, v = item.split("=", 1)
    try:
        v = json.loads(v)
    except json.JSONDecodeError:
        pass
    if k == "rope_scaling":
        from kvspill.config import parse_rope_scaling
        v = parse_rope_scaling("linear:1" if v == "none" else v)
    kw[k] = v
import os
tasks = tuple(os.environ.get("EVAL_TASKS", ",".join(TASKS)).split(","))
spec = EvalSpec(tasks, tuple(lengths), int(samples), 0, bool(int(tf)))
t0 = time.time()
doc = run_eval(model, kw, spec, log=lambda line: print(line, flush=True))
doc["label"] = label
from pathlib import Path
write_report(doc, Path(out))
print(label, "done in", round(time.time() - t0, 1), "s", flush=True)

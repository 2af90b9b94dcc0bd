"""Dev only: `kvspill eval` without the CLI's packages (typer/fastapi are not on the GPU image).
usage: eval_drv.py MODEL OUT LABEL LENGTHS(comma) HOT_TOKENS SAMPLES TF(0/1) [key=value ...]
EVAL_TASKS (comma list, may be empty), EVAL_SEED. block_size=N is passed to hot_kv_kwargs too."""
import json, os, sys, time
from pathlib import Path
from kvspill.eval.runner import EvalSpec, hot_kv_kwargs, run_eval
from kvspill.eval.report import write_report
from kvspill.eval.tasks import TASKS

model, out, label, lengths, hot, samples, tf, *extra = sys.argv[1:]
lengths = [int(x) for x in lengths.split(",")]
kw = {"max_model_len": max(lengths), "device": os.environ.get("EVAL_DEVICE", "cuda")}
for item in extra:
    k, v = item.split("=", 1)
    try:
        v = json.loads(v)
    except json.JSONDecodeError:
        pass
    kw[k] = v
if int(hot):
    kw = {**hot_kv_kwargs(int(hot), max(lengths), block_size=kw.get("block_size", 16)), **kw}
tasks = tuple(t for t in os.environ.get("EVAL_TASKS", ",".join(TASKS)).split(",") if t)
spec = EvalSpec(tasks, tuple(lengths), int(samples), int(os.environ.get("EVAL_SEED", "0")), bool(int(tf)))
t0 = time.time()
doc = run_eval(model, kw, spec, log=lambda line: print(line, flush=True))
doc["label"] = label
write_report(doc, Path(out))
print(label, "done in", round(time.time() - t0, 1), "s", flush=True)

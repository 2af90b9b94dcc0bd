"""The long-context quality harness behind `kvspill eval`: tasks.py (synthetic prompts and the
scorer, torch-free), runner.py (greedy runs and teacher-forced agreement through `LLM`),
report.py (eval.json and the markdown tables). Docs: docs/eval.md."""

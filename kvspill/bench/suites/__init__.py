"""`kvspill bench progressive | stability | compare`: benchmark suites that write a results folder.

Layout: `targets.py` (the one interface the suites drive: run requests, read memory), the
in-process engine target and the server target (`url_target.py`), `configs.py` (contexts and
the named configurations of `compare`), one module per suite, `report.py` (JSON lines, CSV,
markdown) and `plots.py` (PNG through matplotlib's Agg backend).

Invariants:
- Suites see only the `Target` interface: a suite runs the same against the engine in this
  process and against a server at a URL.
- A failed request is a row (`ok=False`, `err`), never an exception out of a suite; bad input
  (contexts past the model's length, unknown configuration names) raises `KvspillError` before
  anything runs, with a message that says what to change.
- Row fields match the benchmark JSON of `shared/bench/README.md` where they overlap
  (`ctx`, `new_tokens`, `ok`, `err`, `ttft_s`, `decode_tok_s`, `peak_gpu_gib`).
- Importing this package imports neither torch nor matplotlib; targets and plots import them lazily.
"""

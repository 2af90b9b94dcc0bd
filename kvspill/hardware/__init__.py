"""This host as kvspill finds it: pre-flight checks (`checks.py`: what makes KV offloading work
or hurt here, with fixes) and calibration (`calibrate.py`: the bandwidths the planner divides by,
measured through the engine's own cold paths). `kvspill doctor` runs both; the engine runs the
checks at start.

Invariants: the planner (`kvspill.plan`) never imports this package: it reads the saved
calibration (`plan/calibrate.py`), so planning stays torch-free and measuring may use storage and
attention.
"""

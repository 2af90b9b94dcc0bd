"""`python -m kvspill.bench`: the engine benchmark (see engine_bench.py)."""

import sys

from kvspill.bench.engine_bench import main

if __name__ == "__main__":  # tensor-parallel workers are spawned: they re-import this module
    sys.exit(main())

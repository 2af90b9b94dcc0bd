"""`python -m kvspill.bench`: the engine benchmark (see engine_bench.py)."""

import sys

from kvspill.bench.engine_bench import main

sys.exit(main())

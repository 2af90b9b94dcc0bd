"""`python -m kvspill.server [MODEL] [flags]`: the same as `kvspill serve [MODEL] [flags]`.

The server package never imports the CLI (the CLI imports the server): this entry point hands
the command line to `python -m kvspill` (`kvspill/__main__.py`) with `serve` in front, so the
flags, their `KVSPILL_*` variables, the config file, logging and the one-line errors are the
`kvspill serve` command's own.
"""

from __future__ import annotations

import runpy
import sys


def main() -> None:
    sys.argv = [sys.argv[0], "serve", *sys.argv[1:]]
    runpy.run_module("kvspill", run_name="__main__")


if __name__ == "__main__":  # tensor-parallel workers are spawned: they re-import this module
    main()

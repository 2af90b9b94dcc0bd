"""`python -m kvspill ...` is the `kvspill` command."""

from kvspill.cli.main import main

if __name__ == "__main__":  # tensor-parallel workers are spawned: they re-import this module
    main()

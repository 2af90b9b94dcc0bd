"""`python -m kvspill ...` is the `kvspill` command."""

from kvspill.cli.main import main

main()

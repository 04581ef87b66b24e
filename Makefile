# tickwarden: `make demo` runs the demo on the embedded database, `make test` runs every test,
# `make lint` runs ruff and mypy. Each creates the virtual environment and installs what it needs
# on first use: the demo only tickwarden itself, the others also the test extras and, for the
# tests, Debian's Chromium when it is missing. The demo stops the embedded PostgreSQL it started.

# As root, the interpreter environment processes (unprivileged users) can execute: scripts/pick-python.sh.
PYTHON ?= $(shell sh scripts/pick-python.sh)
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: demo test lint bench bench-quick install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(TEST_STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/tickwarden demo

test: $(TEST_STAMP)
	PYTHON=$(BIN)/python sh scripts/install-browser.sh
	$(BIN)/python -m pytest -n 2 --dist loadfile -q

lint: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

# Every benchmark in its own process, then one table of figures, floors, ratios and targets.
# `make bench-quick` runs them at small sizes (minutes, figures not comparable with the targets);
# Procrastinate and PgQueuer are measured beside tickwarden when installed (pip install -e '.[bench]').
bench: $(TEST_STAMP)
	$(BIN)/python -m benchmarks $(BENCH_ARGS)

bench-quick: $(TEST_STAMP)
	$(BIN)/python -m benchmarks --quick $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache

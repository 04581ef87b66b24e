# tickwarden: `make demo` runs the demo on the embedded database, `make test` runs every test,
# `make lint` runs ruff and mypy. Each creates the virtual environment and installs what it needs
# on first use; `make test` also installs Debian's Chromium for the dashboard's browser tests when it is missing.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint bench bench-quick install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/tickwarden demo

test: $(STAMP)
	PYTHON=$(BIN)/python sh scripts/install-browser.sh
	$(BIN)/python -m pytest -n 2 --dist loadfile -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

# Every benchmark in its own process, then one table of figures, floors, ratios and targets.
# `make bench-quick` runs them at small sizes (minutes, figures not comparable with the targets);
# Procrastinate and PgQueuer are measured beside tickwarden when installed (pip install -e '.[bench]').
bench: $(STAMP)
	$(BIN)/python -m benchmarks $(BENCH_ARGS)

bench-quick: $(STAMP)
	$(BIN)/python -m benchmarks --quick $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache

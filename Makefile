# tickwarden: `make demo` runs the demo on the embedded database, `make test` runs every test.
# Both create the virtual environment and install what they need on first use: the demo only
# tickwarden itself, the tests also their extras and, when it is missing, Debian's Chromium for
# the dashboard's browser tests. The demo stops the embedded PostgreSQL it started.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: demo test bench install clean

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

bench: $(TEST_STAMP)
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) .pytest_cache

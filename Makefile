# tickwarden: `make demo` runs the demo on the embedded database, `make test` runs every test.
# Both create the virtual environment and install what they need on first use; `make test`
# also installs Debian's Chromium for the dashboard's browser tests when it is missing.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test bench install clean

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

bench: $(STAMP)
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) .pytest_cache

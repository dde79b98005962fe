# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: demo test lint unit venv clean bench browser docs-figures docs-figures-check

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e '.[test]'
	rm -f $(VENV)/.installed-* && touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/kdispatch demo

lint: $(STAMP)
	$(BIN)/ruff check eventlog webhook reconciler tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

# The web page is tested in Debian's chromium (tests/reconciler/web); CI runs as root on Debian.
browser:
	@test -x /usr/bin/chromium || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium)

unit: $(STAMP) browser
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 3

test: lint unit

bench: $(STAMP)
	for f in bench/*.py; do case $$f in bench/docs_figures.py) continue;; esac; echo "== $$f"; $(BIN)/python $$f || exit 1; done

# Every `kdispatch simulate` table in README.md and docs/simulate.md, re-run and rewritten in place
# (stamped with the commit); -check compares without writing. Several minutes: whole-trace runs.
docs-figures: $(STAMP)
	$(BIN)/python bench/docs_figures.py

docs-figures-check: $(STAMP)
	$(BIN)/python bench/docs_figures.py --check

clean:
	rm -rf $(VENV) .kdispatch .kdispatch.prev-* .mypy_cache .pytest_cache

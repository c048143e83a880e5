# Two entry points: `make serve` and `make test`. Both build .venv from scratch when needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

CORPUS_DEFAULT := ../shared/corpus/dsh-sessions
HISTORY_CORPUS_DIR ?= $(if $(wildcard $(CORPUS_DEFAULT)),$(abspath $(CORPUS_DEFAULT)),)
export HISTORY_CORPUS_DIR

PACKAGES := codec persistence history_service history_client

.PHONY: serve test lint typecheck unit bench venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

serve: $(STAMP)
	$(BIN)/history-service serve --demo

test: lint typecheck unit

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy $(PACKAGES) tests bench

# The bench suites that have a smoke mode run here too, so they cannot rot.
SMOKE_BENCH := bench/test_fixtures.py bench/test_decode_runs.py

unit: $(STAMP)
	$(BIN)/pytest
	HISTORY_BENCH_SMOKE=1 $(BIN)/pytest -p no:cacheprovider $(SMOKE_BENCH)

bench: $(STAMP)
	$(BIN)/pytest bench -s

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis .benchmarks

# Two entry points: `make serve` and `make test`. Both build .venv from scratch when needed.
SHELL := /bin/bash
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

# The service and the stores are the `server` extra; developers get them with dev.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e '.[server,dev]'
	touch $(STAMP)

# `make serve PORT=8001 HOST=0.0.0.0` runs the service with HISTORY_PORT / HISTORY_HOST set.
# Only values given on the make command line count (a HOST or PORT exported in the environment
# is often the machine's own, so it is ignored), and one not given is not set, so the service's
# own default, or a HISTORY_* variable already exported, applies.
serve_env = $(if $(filter command line,$(origin $(1))),HISTORY_$(1)='$($(1))' )

serve: $(STAMP)
	$(call serve_env,HOST)$(call serve_env,PORT)$(BIN)/history-service serve --demo

test: lint typecheck unit

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy $(PACKAGES) testing tests bench

# The bench suites that have a smoke mode run here too, so they cannot rot.
SMOKE_BENCH := bench/test_fixtures.py bench/test_decode_runs.py bench/test_history_transport.py bench/test_page_path.py \
	bench/test_follow_load.py bench/test_follow_scale.py bench/test_throughput.py bench/test_report.py

unit: $(STAMP)
	$(BIN)/pytest
	HISTORY_BENCH_SMOKE=1 $(BIN)/pytest -p no:cacheprovider $(SMOKE_BENCH)

# Every suite at full size, then the report. The run's result lines are kept in
# bench/results/<UTC time>.txt and docs/benchmarks.md is regenerated from them.
bench: $(STAMP)
	mkdir -p bench/results
	run=bench/results/$$(date -u +%Y%m%dT%H%M%SZ).txt; \
	$(BIN)/pytest -p no:cacheprovider bench -s 2>&1 | tee bench/results/last-run.log; \
	status=$${PIPESTATUS[0]}; \
	grep -E '^HISTORY_[A-Z_]+_RESULT ' bench/results/last-run.log > $$run; \
	rm bench/results/last-run.log; \
	$(BIN)/python -m bench.report $$run --command "$(if $(HISTORY_TEST_PG_URL),scripts/with-postgres make bench,make bench)"; \
	exit $$status

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis .benchmarks

# Two entry points: `make serve` and `make test`. Both build .venv from scratch when needed.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev

CORPUS_DEFAULT := ../shared/corpus/dsh-sessions
HISTORY_CORPUS_DIR ?= $(if $(wildcard $(CORPUS_DEFAULT)),$(abspath $(CORPUS_DEFAULT)),)
export HISTORY_CORPUS_DIR

PACKAGES := codec persistence history_service history_client

.PHONY: serve test lint typecheck typecheck-js unit fuzz bench venv venv-server clean

JS := clients/js
JS_STAMP := $(JS)/node_modules/.installed-lock

# `make venv`: everything a developer runs; `make venv-server`: what `make serve` needs.
venv: $(DEV_STAMP)

venv-server: $(STAMP)

# The service and the stores are the `server` extra: all `make serve` installs. The dev extra
# (which includes server) is added on top, once, by the first target that needs it; it is
# redone whenever the server install is, so a changed pyproject.toml reaches both.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e '.[server]'
	touch $(STAMP)

$(DEV_STAMP): $(STAMP)
	$(BIN)/python -m pip install -e '.[dev]'
	touch $(DEV_STAMP)

# `make serve PORT=8001 HOST=0.0.0.0` runs the service with HISTORY_PORT / HISTORY_HOST set.
# Only values given on the make command line count (a HOST or PORT exported in the environment
# is often the machine's own, so it is ignored), and one not given is not set, so the service's
# own default, or a HISTORY_* variable already exported, applies.
serve_env = $(if $(filter command line,$(origin $(1))),HISTORY_$(1)='$($(1))' )

serve: $(STAMP)
	$(call serve_env,HOST)$(call serve_env,PORT)$(BIN)/history-service serve --demo

# The checks (lint, typecheck) run beside the suites, not before them: the suites spend much of their
# time waiting on servers and browsers, so on CI's two cores the checks add little wall time. Their
# output is held back until the suites end, and `make test` fails when the checks or the suites do.
# The JavaScript packages are installed first, as the suites use them too.
test: $(DEV_STAMP)
	@if command -v npm >/dev/null; then $(MAKE) --no-print-directory $(JS_STAMP); fi
	@checks=$$(mktemp); \
	$(MAKE) --no-print-directory lint typecheck >$$checks 2>&1 & pid=$$!; \
	$(MAKE) --no-print-directory unit; suites=$$?; \
	wait $$pid; status=$$?; cat $$checks; rm -f $$checks; \
	if [ $$status -ne 0 ]; then echo "make test: lint or typecheck failed" >&2; fi; \
	[ $$suites -eq 0 ] && [ $$status -eq 0 ]

lint: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(DEV_STAMP) typecheck-js
	$(BIN)/mypy $(PACKAGES) testing tests bench

# The JavaScript package and the viewer are JSDoc-typed JavaScript, checked by tsc (a dev
# dependency of clients/js, pinned by its package-lock.json). Without npm this step says so.
# The stamp is a copy of the lock that was installed, as scripts/with-node keeps it.
$(JS_STAMP): $(JS)/package-lock.json
	cd $(JS) && npm ci --no-audit --no-fund --loglevel=error
	cp $(JS)/package-lock.json $(JS_STAMP)

typecheck-js:
	@if command -v npm >/dev/null; then \
		$(MAKE) --no-print-directory $(JS_STAMP) && \
		$(JS)/node_modules/.bin/tsc --noEmit -p $(JS) && \
		$(JS)/node_modules/.bin/tsc --noEmit -p history_service/viewer; \
	else echo "typecheck-js: skipped: npm is not on PATH (scripts/with-node installs it)"; fi

# The bench suites that have a smoke mode run here too, so they cannot rot.
SMOKE_BENCH := bench/test_fixtures.py bench/test_decode_runs.py bench/test_history_transport.py bench/test_page_path.py \
	bench/test_follow_load.py bench/test_follow_scale.py bench/test_throughput.py bench/test_js_perf.py \
	bench/test_viewer_perf.py bench/test_metrics_cost.py bench/test_memory_bounds.py bench/test_report.py bench/test_profile.py bench/test_hot_path.py bench/test_asgi_cost.py \
	bench/test_lifecycle.py bench/test_durable_streams.py bench/test_capacity.py bench/test_live_wire.py \
	bench/test_search.py

# Both suites run on TEST_WORKERS pytest-xdist workers (`make unit TEST_WORKERS=0` runs them in one
# process), which cuts CI's wall time on its two cores. Any two tests may run at once: each worker has
# its own PostgreSQL database (conftest.py). A benchmark module keeps its tests on one worker
# (loadfile), as its result line sums them all; a test module whose servers its tests share asks for
# one worker with `xdist_group` (loadgroup), so they start once.
# The 25 slowest tests are listed at the end: CI must stay under 20 minutes.
TEST_WORKERS ?= 2

unit: $(DEV_STAMP)
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup --durations=25
	HISTORY_BENCH_SMOKE=1 $(BIN)/pytest -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile $(SMOKE_BENCH)

# Contract fuzzing at depth: `make test` runs 100 cases per operation, always the same ones;
# this runs 1000 per operation, new ones each run, against the same real server.
fuzz: $(DEV_STAMP)
	HISTORY_FUZZ_EXAMPLES=1000 $(BIN)/pytest -p no:cacheprovider tests/history_service/test_fuzz.py

# Every suite at full size, then the report. The run's result lines are kept in
# bench/results/<UTC time>.txt and docs/benchmarks.md is regenerated from them.
bench: $(DEV_STAMP)
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

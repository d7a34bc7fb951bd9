# potatoq: `make demo` and `make test` set everything up on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.potatoq-installed
# Test processes of make test: most tests wait on worker subprocesses and servers, so two
# processes (one test file each at a time; every test is isolated by its own schema, key
# prefix, queue prefix or private server) roughly halve the wall time on two cores.
PYTEST_WORKERS ?= 2
UV := $(shell command -v uv 2>/dev/null)

.PHONY: demo test test-fast lint format bench bench-amqp10 bench-scale bench-scale-plot bench-scale-enqueue bench-expiry bench-inspect-scale bench-pg-estimates bench-limits bench-footprint bench-history-scale bench-history-cost bench-history-layouts bench-soak bench-soak-plot reliability clean venv test-django-tasks services services-stop dist

venv: $(STAMP)

# $(call make_venv,DIR): create the virtualenv DIR with uv, or python3 -m venv (installing
# python3-venv first on Debian/Ubuntu when we are root and it is missing).
define make_venv
	@if [ ! -x $(1)/bin/python ]; then \
	  if [ -n "$(UV)" ]; then uv venv -q --python $(PYTHON) $(1); \
	  elif ! $(PYTHON) -m venv $(1) 2>/dev/null; then \
	    rm -rf $(1); \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	      echo "installing python3-venv (needed by python3 -m venv) ..."; \
	      (apt-get install -y -q python3-venv >/dev/null 2>&1 || (apt-get update -q >/dev/null && apt-get install -y -q python3-venv >/dev/null)); \
	      $(PYTHON) -m venv $(1); \
	    else echo "error: '$(PYTHON) -m venv' failed; install python3-venv (Debian/Ubuntu) and retry" >&2; exit 1; fi; \
	  fi; \
	fi
endef

# $(call pip_install,DIR,SPEC): install SPEC into the virtualenv DIR.
define pip_install
	@if [ -n "$(UV)" ]; then uv pip install -q --python $(1)/bin/python $(2); \
	else $(1)/bin/python -m pip install -q --disable-pip-version-check $(2); fi
endef

$(STAMP): pyproject.toml
	$(call make_venv,$(VENV))
	$(call pip_install,$(VENV),-e '.[dev]')
	@touch $(STAMP)

# The benchmark peers live in virtualenvs of their own, so that their pins can't break the
# test venv: .venv-bench (potatoq, Celery, Dramatiq, RQ, huey, Procrastinate) and
# .venv-bench-arq (arq pins redis<6, Celery's kombu needs redis>=6.4).
BENCH_VENV ?= .venv-bench
BENCH_ARQ_VENV ?= .venv-bench-arq
BENCH_STAMP := $(BENCH_VENV)/.potatoq-bench-installed
# (in a variable: a literal comma would split the $(call) arguments)
BENCH_SPEC := -e '.[all,bench]'
BENCH_ARQ_STAMP := $(BENCH_ARQ_VENV)/.potatoq-bench-installed

$(BENCH_STAMP): pyproject.toml
	$(call make_venv,$(BENCH_VENV))
	$(call pip_install,$(BENCH_VENV),$(BENCH_SPEC))
	@touch $(BENCH_STAMP)

$(BENCH_ARQ_STAMP): pyproject.toml
	$(call make_venv,$(BENCH_ARQ_VENV))
	$(call pip_install,$(BENCH_ARQ_VENV),-e '.[bench-arq]')
	@touch $(BENCH_ARQ_STAMP)

demo: $(STAMP)
	$(VENV)/bin/potatoq demo

# The test services (scripts/services/): PostgreSQL, Redis, Valkey 8 and RabbitMQ 4, each
# reused when it already runs on its port, else started (RabbitMQ 4 and Valkey from a Debian 13
# rootfs built once, which needs root). `up` prints export lines with their URLs.
SERVICES_UP := bash scripts/services/up

services:
	@$(SERVICES_UP) --strict

# Stops only what `make services` / `make test` started; servers they reused keep running.
services-stop:
	@bash scripts/services/down

# Starts the missing services first (a warning, not an error, when one can't start outside
# CI: its tests then skip and the summary lists it).
test: $(STAMP)
	@echo "make test: starting the test services that are not running (scripts/services/up) ..."
	@exports=$$($(SERVICES_UP)) && eval "$$exports" && $(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# The tests that need no server and no worker processes (memory broker, codec, API, canvas,
# config, CLI, docs), for the edit-test loop. tests/conftest.py marks `server` and `sqlite`
# the tests parametrized onto those brokers; a test that asks for a server in its own body
# is skipped by tests/services.py under POTATOQ_TEST_SERVERLESS=1.
test-fast: $(STAMP)
	POTATOQ_TEST_SERVERLESS=1 $(PY) -m pytest -m "not server and not sqlite and not slow" -rfE $(PYTEST_ARGS)

# A wheel of potatoq in dist/, to install into another project: pip install 'dist/potatoq-*.whl[redis]'
dist: $(STAMP)
	rm -rf dist
	@if [ -n "$(UV)" ]; then uv build -q --wheel -o dist; \
	else $(PY) -m pip wheel -q --disable-pip-version-check --no-deps -w dist .; fi
	@ls dist/*.whl

lint: $(STAMP)
	$(VENV)/bin/ruff check potatoq tests benchmarks scripts
	$(VENV)/bin/ruff format --check potatoq tests benchmarks scripts
	$(VENV)/bin/mypy
	$(PY) -m pytest -q -p no:cacheprovider tests/test_layers.py  # DESIGN's import directions

format: $(STAMP)
	$(VENV)/bin/ruff format potatoq tests benchmarks scripts
	$(VENV)/bin/ruff check --fix potatoq tests benchmarks scripts

# Every broker, potatoq beside its peers, in one run (docs/benchmarks.md). Select with
# e.g. BENCH_ARGS="--brokers redis,postgres -n 2000".
bench: $(BENCH_STAMP) $(BENCH_ARQ_STAMP)
	$(BENCH_VENV)/bin/python -m benchmarks.run --arq-python $(BENCH_ARQ_VENV)/bin/python $(BENCH_ARGS)

# pika (AMQP 0.9.1) against RabbitMQ 4's AMQP 1.0 client on potatoq's pattern (quorum queue,
# confirms, late ack, prefetch 1 and 4), rounds alternating, then what a quorum queue does
# with a delivery given back each way (docs/brokers/rabbitmq.md). Needs RabbitMQ 4.
AMQP10_ARGS ?= -n 5000 --rounds 3
bench-amqp10: $(BENCH_STAMP)
	@exports=$$($(SERVICES_UP) rabbitmq4) && eval "$$exports" && \
	  $(BENCH_VENV)/bin/python -m benchmarks.amqp10 "$$POTATOQ_TEST_RABBITMQ_URL" $(AMQP10_ARGS) && \
	  $(BENCH_VENV)/bin/python -m benchmarks.amqp10_outcomes "$$POTATOQ_TEST_RABBITMQ_URL"

# Cost behind a backlog (SQLite, PostgreSQL, Redis, RabbitMQ 4), broker level; not in CI.
# Defaults are the full sizes (1M ready + 1M delayed + 10M results); e.g.
# SCALE_ARGS="--brokers sqlite,redis --ready 100000 --delayed 100000 --results 1000000 --drain-seconds 60".
# Figures go to $(SCALE_JSON) too; `make bench-scale-plot` draws docs/img/scale-*.png from it
# (matplotlib, in the bench virtualenv). --paired N adds N rounds of an empty twin broker and
# the full one back to back (the ratios to trust on a shared machine). PostgreSQL result expiry at a cluster's rate:
# `make bench-expiry` (EXPIRY_ARGS, e.g. "--rate 10000 --nodes 3 --seconds 240").
SCALE_JSON ?= bench-scale.jsonl
bench-scale: $(STAMP)
	eval "$$(bash scripts/services/up postgres redis rabbitmq4)" && \
	  $(PY) -m benchmarks.scale --json $(SCALE_JSON) $(SCALE_ARGS)

bench-scale-plot: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m benchmarks.scale_plot $(SCALE_JSON)

bench-expiry: $(STAMP)
	$(PY) -m benchmarks.scale_expiry $(EXPIRY_ARGS)

# SQLite: one enqueue's CPU time and read/write system calls in the issue's 3 GB file against
# an empty one, per pragma variant (docs/benchmarks.md, "Scale"). Not in CI. Smaller:
# SCALE_ENQUEUE_ARGS="--ready 300000 --delayed 300000 --results 3000000 --evict".
bench-scale-enqueue: $(STAMP)
	$(PY) -m benchmarks.scale_sqlite_enqueue $(SCALE_ENQUEUE_ARGS)

# Inspection (queues, status, dashboard overview, /metrics) and purge behind a million-task
# backlog, per broker (docs/benchmarks.md, "Inspection at a million"). Not in CI: minutes
# and gigabytes. Smaller: INSPECT_ARGS="--ready 100000 --delayed 100000 --results 0".
bench-inspect-scale: $(STAMP)
	eval "$$(bash scripts/services/up)" && $(PY) -m benchmarks.inspect_scale $(INSPECT_ARGS)

# PostgreSQL's queue-count estimates against exact counts, with each queue's tasks in runs,
# interleaved at random, or in bursts; the page sample it replaced beside it (docs/benchmarks.md,
# "Inspection at a million"). Not in CI. Smaller: PG_ESTIMATES_ARGS="--ready 100000 --delayed 100000".
bench-pg-estimates: $(STAMP)
	$(PY) -m benchmarks.pg_estimates $(PG_ESTIMATES_ARGS)

# What tasks waiting on a limit cost unlimited ones in the same queue (issue 29: under 10 %),
# in paired short runs; not in CI. E.g. LIMITS_ARGS="--brokers sqlite,redis --pairs 16".
bench-limits: $(STAMP)
	$(PY) -m benchmarks.limits_cost $(LIMITS_ARGS)

# An idle `-c 2` worker per broker: RSS and PSS of its processes, idle CPU over 30 s; not in
# CI. E.g. FOOTPRINT_ARGS="--brokers sqlite,redis,postgres --busy-writer --seconds 30".
bench-footprint: $(STAMP)
	$(PY) -m benchmarks.footprint $(FOOTPRINT_ARGS)

# A soak per broker (issue 27): a real `potatoq worker -c 2` at half its measured maximum
# rate for 30 minutes, results kept 10 minutes, sampling storage, worker memory and the
# backlog every 30 s into $(SOAK_JSON) (docs/benchmarks.md, "Soak"). Not in CI: 32 minutes
# per broker. PostgreSQL and RabbitMQ 4 run on servers of their own (ports 5442 and 5694:
# a test server may turn autovacuum off, and the delay cascade is shared by a node's
# users). E.g. SOAK_ARGS="--brokers sqlite,redis --minutes 10"; `make bench-soak-plot`
# draws docs/img/soak-*.png.
SOAK_JSON ?= bench-soak.jsonl
bench-soak: $(STAMP)
	@pg=$$(POTATOQ_POSTGRES_PORT=5442 bash scripts/services/postgres.sh start) && \
	  POTATOQ_RABBITMQ4_PORT=5694 bash scripts/services/rabbitmq4.sh start >/dev/null && \
	  $(PY) -m benchmarks.soak --postgres-url "$$pg" --json $(SOAK_JSON) $(SOAK_ARGS)

bench-soak-plot: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m benchmarks.soak_report $(SOAK_JSON) --plot docs/img

# Task history at 10 million records (issue 31): SQLite and PostgreSQL filled by bulk SQL,
# Redis by pipelined stream adds; page, filter and dashboard timings (docs/benchmarks.md,
# "History at 10 million records"). Not in CI: minutes, and ~6 GB of disk per SQL broker.
bench-history-scale: $(STAMP)
	$(PY) -m benchmarks.history_scale $(HISTORY_SCALE_ARGS)

# What task history costs on Redis, in CPU (issue 31's 5 %): a one-process settle-and-claim
# loop with history on and off alternating, the process's CPU plus a private redis-server's
# (port 6395, started and stopped by it), and the server's CPU per history_append record
# (docs/benchmarks.md, "Task history cost"). Another checkout's code: run the script by its
# path with PYTHONPATH=that checkout. E.g. HISTORY_COST_ARGS="--chunks 20 --runs 3".
bench-history-cost: $(STAMP)
	$(PY) benchmarks/history_cost_redis.py $(HISTORY_COST_ARGS)

# What a task-history record costs a SQLite worker to build and to store, by table layout
# (today's indexed rows, a batched prototype, the bare table): docs/benchmarks.md, "Sixth
# pass". E.g. HISTORY_LAYOUTS_ARGS="--records 30000 --runs 3".
bench-history-layouts: $(STAMP)
	$(PY) -m benchmarks.history_layouts $(HISTORY_LAYOUTS_ARGS)

# The fault-injection suite at full size (a 2,000-task kill storm per broker, broker restarts,
# fencing, bad input, SQLite faults): rewrites docs/reliability-figures.md. Needs root (a
# tmpfs mount, initdb through runuser, a private RabbitMQ node) and the test services.
reliability: $(STAMP)
	$(PY) -m tests.faults.report $(if $(PYTEST_ARGS),-- $(PYTEST_ARGS))

# django.tasks (Django 6) needs Python >= 3.12: its backend's tests run in a venv of their own.
# (asks the interpreter for its path: a pyenv shim on PATH may exist without a 3.13 selected)
PYTHON313 ?= $(shell python3.13 -c 'import sys; print(sys.executable)' 2>/dev/null || echo /root/.pyenv/versions/3.13.0/bin/python3.13)
VENV313 ?= .venv313
STAMP313 := $(VENV313)/.potatoq-installed

$(STAMP313): pyproject.toml
	@if [ ! -x $(VENV313)/bin/python ]; then \
	  if [ -n "$(UV)" ]; then uv venv -q --python $(PYTHON313) $(VENV313); \
	  else $(PYTHON313) -m venv $(VENV313); fi; \
	fi
	@if [ -n "$(UV)" ]; then uv pip install -q --python $(VENV313)/bin/python -e '.[dev]' 'django>=6.0'; \
	else $(VENV313)/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]' 'django>=6.0'; fi
	@touch $(STAMP313)

test-django-tasks: $(STAMP313)
	POTATOQ_REQUIRE_DJANGO_TASKS=1 $(VENV313)/bin/python -m pytest tests/integrations/django_tasks $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) $(VENV313) $(BENCH_VENV) $(BENCH_ARQ_VENV) .pytest_cache .mypy_cache .ruff_cache dist build

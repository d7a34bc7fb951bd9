# potatoq: `make demo` and `make test` set everything up on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.potatoq-installed
UV := $(shell command -v uv 2>/dev/null)

.PHONY: demo test lint format bench reliability clean venv test-django-tasks

venv: $(STAMP)

$(STAMP): pyproject.toml
	@if [ ! -x $(PY) ]; then \
	  if [ -n "$(UV)" ]; then uv venv -q --python $(PYTHON) $(VENV); \
	  elif ! $(PYTHON) -m venv $(VENV) 2>/dev/null; then \
	    rm -rf $(VENV); \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	      echo "installing python3-venv (needed by python3 -m venv) ..."; \
	      (apt-get install -y -q python3-venv >/dev/null 2>&1 || (apt-get update -q >/dev/null && apt-get install -y -q python3-venv >/dev/null)); \
	      $(PYTHON) -m venv $(VENV); \
	    else echo "error: '$(PYTHON) -m venv' failed; install python3-venv (Debian/Ubuntu) and retry" >&2; exit 1; fi; \
	  fi; \
	fi
	@if [ -n "$(UV)" ]; then uv pip install -q --python $(PY) -e '.[dev]'; \
	else $(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'; fi
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/potatoq demo

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check potatoq tests benchmarks
	$(VENV)/bin/ruff format --check potatoq tests benchmarks
	$(VENV)/bin/mypy

format: $(STAMP)
	$(VENV)/bin/ruff format potatoq tests benchmarks
	$(VENV)/bin/ruff check --fix potatoq tests benchmarks

bench: $(STAMP)
	@if [ -n "$(UV)" ]; then uv pip install -q --python $(PY) -e '.[dev,bench]'; \
	else $(PY) -m pip install -q --disable-pip-version-check -e '.[dev,bench]'; fi
	$(PY) -m benchmarks.run $(BENCH_ARGS)

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
	rm -rf $(VENV) $(VENV313) .pytest_cache .mypy_cache .ruff_cache

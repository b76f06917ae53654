# Two commands do all the set-up on a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test check bench soak clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/telemetry-reporter demo

test: $(STAMP)
	$(PY) -m pytest

check: $(STAMP)
	$(VENV)/bin/ruff check collector reporter lua config tests bench
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) bench/collect.py
	$(PY) bench/pipeline.py

soak: $(STAMP)
	$(PY) bench/soak.py

clean:
	rm -rf $(VENV) build dist *.egg-info

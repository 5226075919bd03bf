# Two entry points for a new machine: `make demo` and `make test`. Each sets itself up.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.logkit-installed
DEMO_DIR ?= demo_output

.PHONY: install demo test test-fast lint fixtures clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# the pinned CPU torch first, so nothing below pulls a CUDA build
	$(PY) -m pip install -q -c constraints.txt torch
	$(PY) -m pip install -q -c constraints.txt -e '.[train,qlora,dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	bash examples/run_demo.sh $(DEMO_DIR)

test: $(STAMP)
	$(PY) -m pytest -q

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check .

fixtures: $(STAMP)
	bash sample_logs/regenerate.sh

clean:
	rm -rf $(DEMO_DIR) .pytest_cache

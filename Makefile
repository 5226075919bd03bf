# Two entry points for a new machine: `make demo` and `make test`. Each sets itself up.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.logkit-installed
DEMO_DIR ?= demo_output

.PHONY: install demo test test-fast lint fixtures mutation fuzz clean

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
	bash sample_logs/regenerate_why_slow.sh
	bash sample_logs/regenerate_balanced.sh

# Before a release, not in CI (hours on 2 cores: 3,200 of its 5,075 mutants took 75 minutes; use
# MUTATION_JOBS=N on a larger machine): one-line changes to the modules that
# define figures ([tool.mutmut] in pyproject.toml), each run against the fast tests that reach
# it; then the score per module and every mutant no test caught. A fresh run each time.
MUTATION_JOBS ?= 2
mutation: $(STAMP)
	rm -rf mutants && mkdir mutants
	$(VENV)/bin/mutmut run --max-children $(MUTATION_JOBS) > mutants/run.log 2>&1 || (tail -c 3000 mutants/run.log; exit 1)
	$(PY) -m tests.support.mutation_score --list

# The long fuzz run (not part of make test; the fast suite runs a bounded share of it): the hostile folders
# at full scale (20,000 files, 20,000 rank streams, 1 GB gzip bombs, FIFOs, devices, links, names that are
# not UTF-8, a stream still written), then FUZZ_INPUTS folders drawn from the format strategies; prints the
# inputs tried and the failures by class, exits 1 on any (tests/fuzz/__main__.py).
FUZZ_INPUTS ?= 10000
fuzz: $(STAMP)
	$(PY) -m tests.fuzz --inputs $(FUZZ_INPUTS)

clean:
	rm -rf $(DEMO_DIR) .pytest_cache

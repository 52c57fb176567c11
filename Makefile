# The two commands a fresh machine needs (README "Quick start"):
#   make run   installs logkeeper into the project venv and runs the main job on embedded defaults
#   make test  installs everything the tests need into the same venv and runs the whole suite
# PYTHON selects the interpreter the venv (.venv, or LK_VENV) is made from; default python3.
# ARGS go to `logkeeper serve`: make run ARGS="--config /etc/logkeeper/logkeeper.toml".
# TEST_WORKERS: how many tests run at once (pytest-xdist; most wait on brokers and
# disks rather than compute); 0 runs them one after another.
PYTHON ?= python3
LK_VENV ?= .venv
TEST_WORKERS ?= 2
VPY := $(LK_VENV)/bin/python
export PYTHON LK_VENV

.PHONY: run test bench lint

run:
	@bash scripts/setup.sh run >/dev/null
	@bash scripts/run.sh $(ARGS)

test:
	@bash scripts/setup.sh test >/dev/null
	$(VPY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

bench:
	@bash scripts/setup.sh test >/dev/null
	$(VPY) -m pytest benchmarks -q --benchmark-enable -p no:cacheprovider

lint:
	@bash scripts/setup.sh test >/dev/null
	$(VPY) -m ruff check native logstore checks daemon spark_audit tests benchmarks

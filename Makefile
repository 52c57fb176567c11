# The two commands a fresh machine needs (README "Quick start"):
#   make run   installs logkeeper and runs the main job on embedded defaults
#   make test  installs everything the tests need and runs the whole suite
PYTHON ?= python3
export PYTHON

.PHONY: run test bench lint

run:
	@bash scripts/setup.sh run
	@bash scripts/run.sh

test:
	@bash scripts/setup.sh test
	$(PYTHON) -m pytest -q

bench:
	@bash scripts/setup.sh test
	$(PYTHON) -m pytest benchmarks -q --benchmark-enable -p no:cacheprovider

lint:
	$(PYTHON) -m ruff check native logstore checks daemon spark_audit tests benchmarks

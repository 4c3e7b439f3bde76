.PHONY: install run test bench

install:
	python3 -m venv .venv && .venv/bin/pip install -e '.[dev]'

run:
	scripts/run

test:
	scripts/test

bench:
	scripts/bench/run

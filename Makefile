.PHONY: install run test bench

install:
	scripts/setup --dev

run:
	scripts/run

test:
	scripts/test

bench:
	scripts/bench/run

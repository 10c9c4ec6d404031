# paio — the two commands a fresh machine needs are `make demo` and `make test`.
CARGO ?= cargo
DEMO_ARGS ?=

.PHONY: all setup build demo test test-rust test-c lint bench fuzz header clean

all: build

setup:
	@bash scripts/setup.sh

build: setup
	$(CARGO) build --workspace --release

## Runs the main demo on the embedded default policy (policies/demo.toml).
demo: setup
	$(CARGO) run --release -q -p paio --example demo -- $(DEMO_ARGS)

## Runs every test: format and lint checks, Rust unit/property/integration
## tests, the fuzz corpus, and the C ABI test program.
test: setup lint test-rust test-c

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

test-rust:
	$(CARGO) test --workspace

test-c:
	bash crates/paio-ffi/tests/c/run.sh

## Benchmarks; results go to bench/results/ (see docs/performance.md).
bench: setup
	$(CARGO) run --release -p paio-bench -- all
	bash bench/preload/run.sh

## Coverage-guided fuzzing of the policy parser and rule decoder (nightly).
fuzz:
	bash fuzz/run.sh

## Regenerates crates/paio-ffi/include/paio.h after a change to the C ABI.
header:
	PAIO_BLESS_HEADER=1 $(CARGO) test -p paio-ffi --test header

clean:
	$(CARGO) clean
	rm -rf crates/paio-ffi/tests/c/build

# paio — the two commands a fresh machine needs are `make demo` and `make test`.
CARGO ?= cargo
DEMO_ARGS ?=

PREFIX ?= /usr/local
SYSCONFDIR ?= /etc
DESTDIR ?=

.PHONY: all setup build release-bins install uninstall test-install deb test-deb test-monitoring test-operations-doc demo demo-stage test test-rust test-loom test-c test-python test-rocksdb test-taillat test-criticality test-inheritance rocksdb-plugin taillat-driver lint bench experiment-bandwidth experiment-taillat experiment-criticality experiment-inheritance experiment-cluster soak fuzz header clean

all: build

setup:
	@bash scripts/setup.sh

build: setup
	$(CARGO) build --workspace --release

## The release packages. Every release build below selects all of them, so
## cargo resolves one feature set and builds each crate once: paio-ffi built
## alone gives libc, rustix, serde and paio other features, and a second build.
RELEASE_PKGS = -p paio-cli -p paio-preload -p paio-control -p paio-ffi

## The binaries the demo and experiments run: paio, paiod, libpaio_preload.so
## (and libpaio, the C ABI).
release-bins: setup
	$(CARGO) build --release -q $(RELEASE_PKGS)

## Installs paio under $(DESTDIR)$(PREFIX) (default /usr/local): paio, paiod,
## libpaio_preload.so (found by `paio run` without PAIO_LIB), libpaio.so.0 and
## .a, paio.h, paio.pc, manual pages, shell completions, the example
## policies (share/paio/policies), CMake packages (paio, paio_rocksdb), the
## RocksDB plugin (built with cmake), systemd units (paiod.service and
## paiod.socket) and, unless present, $(DESTDIR)$(SYSCONFDIR)/paio/paiod.toml.
## scripts/install.sh lists every file.
install: setup
	$(CARGO) build --release -q $(RELEASE_PKGS)
	bash scripts/install.sh --prefix "$(PREFIX)" --sysconfdir "$(SYSCONFDIR)" --destdir "$(DESTDIR)"

## Removes exactly what `make install` installed (same PREFIX and DESTDIR).
uninstall:
	bash scripts/install.sh --uninstall --prefix "$(PREFIX)" --sysconfdir "$(SYSCONFDIR)" --destdir "$(DESTDIR)"

## The Debian package target/debian/paio_VERSION_ARCH.deb: what `make
## install PREFIX=/usr` installs, /etc/paio/paiod.toml as a conffile.
deb: setup
	$(CARGO) build --release -q $(RELEASE_PKGS)
	bash scripts/make-deb.sh

## Builds the package, installs it into a temporary root with dpkg --root,
## uses it there, removes and purges it (the machine's packages are untouched).
test-deb: setup
	$(CARGO) build --release -q $(RELEASE_PKGS)
	bash scripts/test-deb.sh

## Runs every command of docs/operations.md's sh blocks as written (make
## install into /usr/local, systemctl and paiod's socket activation and
## reloads, paio doctor) in a container booted with systemd over an overlay
## of this machine's root, so nothing stays (root, systemd-nspawn).
test-operations-doc: release-bins
	bash scripts/test-operations-doc.sh

## The Prometheus rules in packaging/prometheus: valid, and each alert fires
## on its series (promtool test rules).
test-monitoring: setup
	bash scripts/test-monitoring.sh

## Installs into temporary directories, builds and runs the C example and
## `paio run` against the installed tree only, then uninstalls.
test-install: setup
	bash scripts/test-install.sh

## The main demo (under 2 minutes): paiod's max-min fair share with leftover
## redistribution for four unmodified fio instances sharing a throttled disk
## (the paper's §9.3, short version; bench/bandwidth/README.md).
demo: release-bins
	python3 bench/bandwidth/run.py --short $(DEMO_ARGS)

## A stage in one process on the embedded default policy (policies/demo.toml).
demo-stage: setup
	$(CARGO) run --release -q -p paio --example demo

## Runs every test: format and lint checks, Rust unit/property/integration
## tests, the fuzz corpus, and the C ABI test program.
##
## The release binaries it builds and runs (target/release) are built without
## LTO, in 16 codegen units and without debug information: the same code,
## optimized, in a fraction of [profile.release]'s build time on a 2-core
## machine. They are for the tests, not for measurements: `make bench`,
## `make experiment-*` and `make release-bins` rebuild with [profile.release]
## (cargo notices the changed profile), so run benchmarks through make.
## Debug builds (the Rust tests) keep line tables only: backtraces still name
## files and lines, and linking the test binaries is faster.
test: export CARGO_PROFILE_DEV_DEBUG = line-tables-only
test: export CARGO_PROFILE_RELEASE_LTO = false
test: export CARGO_PROFILE_RELEASE_CODEGEN_UNITS = 16
test: export CARGO_PROFILE_RELEASE_DEBUG = 0
test: setup lint test-rust test-loom test-c test-python test-rocksdb test-taillat test-criticality test-inheritance test-install test-deb test-monitoring test-operations-doc

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

test-rust:
	$(CARGO) test --workspace

## loom model checking of the DRL's ticket queue and the priority object's
## lock-free slots (crates/paio/tests/loom_*.rs): the crate built with
## --cfg loom in its own target directory.
test-loom:
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom $(CARGO) test --release -p paio --test loom_drl --test loom_priority --test loom_routing

test-c:
	bash crates/paio-ffi/tests/c/run.sh

test-python: release-bins
	python3 -m pytest -q bench/preload bench/bandwidth bench/taillat bench/criticality bench/original bench/paiod-scale bench/soak bench/inheritance bench/cluster

## The RocksDB plugin: builds libpaio, the plugin and its GoogleTest tests,
## runs ctest (integrations/rocksdb, docs/rocksdb.md).
test-rocksdb:
	bash integrations/rocksdb/build.sh

## The tail-latency workload driver (bench/taillat), linked with the plugin.
taillat-driver: release-bins test-rocksdb
	cmake -S bench/taillat -B bench/taillat/build -DCMAKE_BUILD_TYPE=Release
	cmake --build bench/taillat/build -j2

## A 30-second smoke run of the tail-latency experiment: checks the pipeline
## (RocksDB + plugin + paiod's SILK policy, CSV, plots), not the numbers;
## then the slow-Get diagnosis (every Get over 1 us recorded, so some must be,
## and with direct I/O and a small cache some must have read blocks).
test-taillat: taillat-driver
	python3 bench/taillat/run.py --short
	python3 bench/taillat/run.py --short --setups baseline --workloads mixture --no-plot \
		--set slow_get_us=1 --out target/taillat-slow
	python3 -c "import json; s = json.load(open('target/taillat-slow/mixture/baseline/slow_gets.json'))['all']; \
		assert s['gets'] > 0 and s['block_read_pct'] > 0, s; print('slow-Get diagnosis:', s)"

## A 20-second smoke run of the criticality experiment: checks the pipeline
## (fio critical and background jobs, paio run --critical, the board, CSV,
## table, plots), not the numbers.
test-criticality: release-bins
	python3 bench/criticality/run.py --quick --out target/criticality-smoke --data-dir target/criticality-smoke-data

## A 30-second smoke run of the inheritance experiment: checks the pipeline
## (the loglock program, sqlite next to dd with the dirty bound, db_bench
## through the plugin with stall inheritance, CSV, table, plot), not the
## numbers.
test-inheritance: release-bins rocksdb-plugin
	python3 bench/inheritance/run.py --quick --out target/inheritance-smoke --data-dir target/inheritance-smoke-data

## The RocksDB plugin and its db_bench preload library, built without
## running their tests (make test-rocksdb builds and tests them).
rocksdb-plugin:
	$(CARGO) build --release -q $(RELEASE_PKGS)
	cmake -S integrations/rocksdb -B integrations/rocksdb/build -DPAIO_LIB_DIR=$(CURDIR)/target/release -DPAIO_INCLUDE_DIR=$(CURDIR)/crates/paio-ffi/include
	cmake --build integrations/rocksdb/build -j2

## Benchmarks; results go to bench/results/ (see docs/performance.md).
bench: setup
	$(CARGO) run --release -p paio-bench -- all
	bash bench/preload/run.sh
	bash bench/preload/locks.sh
	bash bench/ffi/pair.sh
	$(CARGO) build --release -p paio-control
	python3 bench/paiod-scale/run.py
	python3 bench/paiod-scale/abuse.py --out bench/results/paiod-scale/abuse.txt

## The full per-application bandwidth experiment (about 12 minutes): baseline,
## static and paio; results and plot in bench/results/bandwidth/.
experiment-bandwidth: release-bins
	python3 bench/bandwidth/run.py

## The tail-latency experiment (paper §9.2, about 55 minutes per repeat):
## baseline RocksDB, its auto-tuned rate limiter in both modes (kWritesOnly,
## kAllIo), and paio with paiod's SILK policy, for three workloads; results
## and plots in bench/results/taillat/. Each is run TAILLAT_REPEAT times
## (default 3, about 2 h 45 min), round-robin with the setups' order rotating
## each round, and medians are reported with each run's maximum (one run's
## max p99 varies by 1-2 ms between identical runs).
TAILLAT_REPEAT ?= 3
experiment-taillat: taillat-driver
	python3 bench/taillat/run.py --repeat $(TAILLAT_REPEAT)

## Critical I/O first (issue 11, about 25 minutes): critical fio reads, RocksDB
## readrandom and sqlite commits against background fio and dd, in six setups
## (vanilla, ionice with BFQ and mq-deadline, a static limit, paio, paio with
## paiod's latency target), 3 rounds;
## results and plots in bench/results/criticality/. Root (scheduler switch).
CRITICALITY_ROUNDS ?= 3
experiment-criticality: release-bins
	python3 bench/criticality/run.py --rounds $(CRITICALITY_ROUNDS)

## Priority inheritance and the dirty-data bound (issue 12, about 12
## minutes): request threads sharing a mutex with a checkpointer, sqlite
## commits next to dd, db_bench write stalls through the plugin; vanilla,
## paio without and with inheritance (and RocksDB's own rate limiter), 3
## rounds; results and plot in bench/results/inheritance/.
INHERITANCE_ROUNDS ?= 3
experiment-inheritance: release-bins rocksdb-plugin
	python3 bench/inheritance/run.py --rounds $(INHERITANCE_ROUNDS)

## Cluster mode at scale (issue 15, about 12 minutes): the global control
## cycle and the failover time at 10, 100 and 1,000 simulated nodes of 100
## stages each against a real etcd (bench/cluster/run.py; docs/cluster.md).
CLUSTER_ROUNDS ?= 3
experiment-cluster: release-bins
	$(CARGO) build --release -q -p paio-bench --bin paio-cluster-sim
	python3 bench/cluster/run.py --rounds $(CLUSTER_ROUNDS)

## paiod's soak test (issue 14, one hour, not in `make test`): mixed load
## under paio with paiod killed and restarted every minute and an abusive
## client; results and plot in bench/results/soak/ (bench/soak/run.py).
soak: release-bins test-rocksdb
	python3 bench/soak/run.py

## Coverage-guided fuzzing of every parser and decoder (fuzz/fuzz_targets; nightly).
fuzz:
	bash fuzz/run.sh

## Regenerates crates/paio-ffi/include/paio.h after a change to the C ABI.
header:
	PAIO_BLESS_HEADER=1 $(CARGO) test -p paio-ffi --test header

clean:
	$(CARGO) clean
	rm -rf crates/paio-ffi/tests/c/build

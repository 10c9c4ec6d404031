#!/usr/bin/env bash
# Builds libpaio (cargo), then the paio RocksDB plugin, its tests and the
# db_bench preload library (cmake, into integrations/rocksdb/build/), and
# runs the tests (ctest), then builds and runs them again under ASan + UBSan
# (integrations/rocksdb/build-asan/). Called by `make test-rocksdb`.
# Needs: librocksdb-dev (7.8.3), libgtest-dev, cmake; rocksdb-tools for the
# db_bench test (skipped without it). JOBS (default 2) sets build parallelism.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
jobs="${JOBS:-2}"

# The packages `make` builds together (its RELEASE_PKGS): built alone,
# paio-ffi would give its dependencies other features and build them again.
(cd "$root" && cargo build --release -p paio-cli -p paio-preload -p paio-control -p paio-ffi -j "$jobs")
cmake -S "$here" -B "$here/build" -DPAIO_LIB_DIR="$target/release" \
    -DPAIO_INCLUDE_DIR="$root/crates/paio-ffi/include"
cmake --build "$here/build" -j "$jobs"
(cd "$here/build" && ctest --output-on-failure)

# The plugin's tests and the example again under ASan + UBSan (any report,
# leaks included, fails them).
cmake -S "$here" -B "$here/build-asan" -DPAIO_LIB_DIR="$target/release" \
    -DPAIO_INCLUDE_DIR="$root/crates/paio-ffi/include" \
    -DPAIO_ROCKSDB_SANITIZE=ON -DPAIO_ROCKSDB_PRELOAD=OFF
cmake --build "$here/build-asan" -j "$jobs"
cd "$here/build-asan"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:halt_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --output-on-failure
# ctest judges example_app by its output alone; under the sanitizers its
# exit status must count too.
rm -rf "$here/build-asan/example-db-direct"
./paio_rocksdb_example "$here/build-asan/example-db-direct" >/dev/null ||
    { echo "build.sh: the example failed under ASan + UBSan" >&2; exit 1; }

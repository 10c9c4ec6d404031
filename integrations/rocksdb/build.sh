#!/usr/bin/env bash
# Builds libpaio (cargo), then the paio RocksDB plugin, its tests and the
# db_bench preload library (cmake, into integrations/rocksdb/build/), and
# runs the tests (ctest). Called by `make test-rocksdb`.
# Needs: librocksdb-dev (7.8.3), libgtest-dev, cmake; rocksdb-tools for the
# db_bench test (skipped without it). JOBS (default 2) sets build parallelism.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
jobs="${JOBS:-2}"

(cd "$root" && cargo build --release -p paio-ffi -j "$jobs")
cmake -S "$here" -B "$here/build" -DPAIO_LIB_DIR="$target/release" \
    -DPAIO_INCLUDE_DIR="$root/crates/paio-ffi/include"
cmake --build "$here/build" -j "$jobs"
cd "$here/build"
ctest --output-on-failure

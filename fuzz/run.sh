#!/usr/bin/env bash
# Runs every fuzz target for FUZZ_SECONDS seconds each (default 60).
# Used by `make fuzz`. Needs a nightly toolchain (libFuzzer instrumentation);
# installs cargo-fuzz if missing.
#
#   FUZZ_SECONDS=300 fuzz/run.sh            # all targets, 5 minutes each
#   fuzz/run.sh policy                      # one target
#
# New interesting inputs go to fuzz/work/<target>/ (not committed); the seed
# corpus fuzz/corpus/<target>/ is only read. A crash leaves its input in
# fuzz/artifacts/<target>/, which `cargo test -p paio --test fuzz_corpus`
# then replays on stable Rust.
set -euo pipefail

cd "$(dirname "$0")"
seconds="${FUZZ_SECONDS:-60}"
jobs="${FUZZ_JOBS:-1}"  # >1: parallel libFuzzer processes per target

if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    echo "fuzz/run.sh: no nightly Rust toolchain; cargo-fuzz needs one." >&2
    echo "  install it with: rustup toolchain install nightly" >&2
    exit 1
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz/run.sh: installing cargo-fuzz" >&2
    cargo install cargo-fuzz
fi

if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo +nightly fuzz list)
fi

for target in "${targets[@]}"; do
    extra=()
    if [ -f "dict/$target.dict" ]; then
        extra+=("-dict=dict/$target.dict")
    fi
    if [ "$jobs" -gt 1 ]; then
        extra+=("-jobs=$jobs" "-workers=$jobs")
    fi
    seeds=("corpus/$target")
    if [ "$target" = policy ]; then
        seeds+=(../policies)
    fi
    if [ "$target" = paiod_config ]; then
        seeds+=(../policies/paiod)
    fi
    mkdir -p "work/$target"
    echo "== fuzzing $target for ${seconds}s" >&2
    cargo +nightly fuzz run "$target" "work/$target" "${seeds[@]}" -- \
        -max_total_time="$seconds" -print_final_stats=1 ${extra[@]+"${extra[@]}"}
done

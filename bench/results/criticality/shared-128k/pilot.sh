#!/bin/bash
# Pilot on RocksDB (the tuning workload, the one whose p99.9 ratio fell
# short with 128 KiB pieces): shared_busy_depth 4 and 8 over the
# experiment's background policy, beside it and vanilla; 2 rounds.
set -u
cd "$(dirname "$0")/../../../.."
P=bench/results/criticality/shared-128k
exec bench/criticality/rotate.sh "${OUT:?set OUT to the output directory}" "${ROUNDS:-2}" \
  "${W:-rocksdb}" \
  vanilla="--setups vanilla" \
  paio="--setups paio" \
  shared-4="--setups paio --paio-policy $P/background-shared-4.toml" \
  shared-8="--setups paio --paio-policy $P/background-shared-8.toml"

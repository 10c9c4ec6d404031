#!/bin/bash
# The report: the experiment's background policy with and without
# shared_busy_depth 8 (chosen on RocksDB in pilot/), beside vanilla, on all
# three critical jobs; 3 rounds, order rotated.
set -u
cd "$(dirname "$0")/../../../.."
P=bench/results/criticality/shared-128k
exec bench/criticality/rotate.sh "${OUT:?set OUT to the output directory}" "${ROUNDS:-3}" \
  "${W:-fio,rocksdb,sqlite}" \
  vanilla="--setups vanilla" \
  paio="--setups paio" \
  shared-8="--setups paio --paio-policy $P/background-shared-8.toml"

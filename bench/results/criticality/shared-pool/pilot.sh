#!/bin/bash
# Pilot on fio (the tuning workload): shared_busy_depth 1, 2 and 4 over the
# experiment's background policy, beside it and vanilla; 2 rounds.
set -u
cd "$(dirname "$0")/../../../.."
P=bench/results/criticality/shared-pool
exec bench/criticality/rotate.sh "${OUT:?set OUT to the output directory}" "${ROUNDS:-2}" \
  "${W:-fio}" \
  vanilla="--setups vanilla" \
  paio="--setups paio" \
  shared-1="--setups paio --paio-policy $P/background-shared-1.toml" \
  shared-2="--setups paio --paio-policy $P/background-shared-2.toml" \
  shared-4="--setups paio --paio-policy $P/background-shared-4.toml"

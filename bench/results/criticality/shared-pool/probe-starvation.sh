#!/bin/bash
# Probe: is the pool's fio p99.9 set by the starvation guard, which admits
# one request per process and interval beyond the pool? The N = 4 policy
# with its 10 ms guard against a 100 ms guard, beside the policy without
# the pool; fio only, 2 rounds, order rotated.
set -u
cd "$(dirname "$0")/../../../.."
P=bench/results/criticality/shared-pool
exec bench/criticality/rotate.sh "${OUT:?set OUT to the output directory}" "${ROUNDS:-2}" \
  "${W:-fio}" \
  shared="--setups paio --paio-policy $P/background-shared.toml" \
  paio="--setups paio" \
  starve100="--setups paio --paio-policy $P/background-shared-starve100.toml" \
  vanilla="--setups vanilla"

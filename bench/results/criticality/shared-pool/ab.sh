#!/bin/bash
# shared_busy_depth = 4 (chosen on fio in pilot.sh's run) over the
# experiment's background policy, with and without paiod's 3 ms p99.9
# target, beside the policy alone, BFQ's idle class and vanilla, on all
# three critical jobs; one setup per run.py invocation, order rotated per
# round.
set -u
cd "$(dirname "$0")/../../../.."
P=bench/results/criticality/shared-pool/background-shared.toml
exec bench/criticality/rotate.sh "${OUT:?set OUT to the output directory}" "${ROUNDS:-3}" \
  "${W:-fio,rocksdb,sqlite}" \
  vanilla="--setups vanilla" \
  shared="--setups paio --paio-policy $P" \
  ionice-bfq="--setups ionice-bfq" \
  target-shared="--setups paio-target --target 3ms --paio-policy $P" \
  paio="--setups paio" \
  paio-target="--setups paio-target --target 3ms"

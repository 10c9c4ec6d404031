#!/bin/bash
# paiod's criticality policy with a 3 ms p99.9 target: the depth a miss
# may cut to before the rate (`min_depth`) at its default 1 against 3 (the
# background policy's busy_depth), beside vanilla; one setup per run.py
# invocation, order rotated per round.
set -u
cd "$(dirname "$0")/../../../.."
exec bench/criticality/rotate.sh "${OUT:?set OUT to the output directory}" "${ROUNDS:-3}" \
  "${W:-fio,rocksdb,sqlite}" \
  min-depth-3="--setups paio-target --target 3ms --target-min-depth 3" \
  vanilla="--setups vanilla" \
  min-depth-1="--setups paio-target --target 3ms"

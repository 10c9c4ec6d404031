#!/bin/bash
# paiod's criticality policy with a 3 ms p99.9 target: the rate a missed
# window keeps (`decrease`) at its default 0.5 against 0.75, beside vanilla;
# one setup per run.py invocation, order rotated per round.
set -u
cd "$(dirname "$0")/../../../.."
exec bench/criticality/rotate.sh "${OUT:?set OUT to the output directory}" "${ROUNDS:-3}" \
  "${W:-fio,rocksdb,sqlite}" \
  decrease-0.75="--setups paio-target --target 3ms --target-decrease 0.75" \
  vanilla="--setups vanilla" \
  decrease-0.5="--setups paio-target --target 3ms"

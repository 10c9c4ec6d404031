#!/bin/bash
# paio with a 3 ms p99.9 latency target (paiod's criticality policy, the
# background policy's depths: run.py since 831b1ab) beside vanilla, BFQ's
# idle class, the static limit and paio without paiod; one setup per
# run.py invocation, order rotated per round.
set -u
cd "$(dirname "$0")/../../../.."
exec bench/criticality/rotate.sh "${OUT:?set OUT to the output directory}" "${ROUNDS:-3}" \
  "${W:-fio,rocksdb,sqlite}" \
  vanilla="--setups vanilla" \
  paio-target="--setups paio-target --target ${TARGET:-3ms}" \
  ionice-bfq="--setups ionice-bfq" \
  paio="--setups paio" \
  static="--setups static"

#!/bin/bash
# Round 3 of trial-readlat2ms with a target the slow disk can meet (20 ms):
# paio with it, then paio without, one run each.
set -u
cd /work/main
OUT=bench/results/taillat-3rounds/trial-readlat2ms
run() {
  local r=$1 label=$2 args
  case $label in
    paio) args=(--setups paio);;
    paio-target20) args=(--setups paio --set silk_read_latency_us=20000);;
  esac
  echo "$(date -u +%H:%M:%S) round $r $label" >> $OUT/order.txt
  python3 bench/taillat/run.py --repeat 1 --workloads mixture "${args[@]}" --out $OUT/r$r-$label > $OUT/r$r-$label.log 2>&1
  echo "$(date -u +%H:%M:%S) done $r $label rc=$?" >> $OUT/order.txt
}
run 3 paio-target20
run 3 paio
echo ALLDONE3 >> $OUT/order.txt

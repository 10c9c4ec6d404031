#!/bin/bash
# The driver of this folder (run from /tmp/trial.sh at commit 021929d). Two rounds of kAllIo, paio and paio with a 2 ms read-latency target, mixture,
# one run per invocation, order reversed in round 2.
set -u
cd /work/main
OUT=bench/results/taillat-3rounds/trial-readlat2ms
run() { # round setup-label
  local r=$1 label=$2 args
  case $label in
    autotuned_all) args=(--setups autotuned_all);;
    paio) args=(--setups paio);;
    paio-target) args=(--setups paio --set silk_read_latency_us=2000);;
  esac
  echo "$(date -u +%H:%M:%S) round $r $label" >> $OUT/order.txt
  python3 bench/taillat/run.py --repeat 1 --workloads mixture "${args[@]}" --out $OUT/r$r-$label > $OUT/r$r-$label.log 2>&1
  echo "$(date -u +%H:%M:%S) done $r $label rc=$?" >> $OUT/order.txt
}
for l in autotuned_all paio paio-target; do run 1 $l; done
for l in paio-target paio autotuned_all; do run 2 $l; done
echo ALLDONE >> $OUT/order.txt

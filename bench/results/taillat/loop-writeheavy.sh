#!/bin/bash
# Round-robin write-heavy runs: autotuned, paio (Algorithm 1 default), paio (writes_only + read budget 200 MiB/s).
cd /work/main
for k in 1 2 3; do
  if [ $k = 1 ]; then
    python3 bench/taillat/run.py --workloads writeheavy --setups baseline --out /tmp/wh/baseline/r$k --no-plot > /tmp/wh/baseline-r$k.log 2>&1
  fi
  python3 bench/taillat/run.py --workloads writeheavy --setups autotuned --out /tmp/wh/autotuned/r$k --no-plot > /tmp/wh/autotuned-r$k.log 2>&1
  python3 bench/taillat/run.py --workloads writeheavy --setups paio --out /tmp/wh/paio-alg1/r$k --no-plot > /tmp/wh/paio-alg1-r$k.log 2>&1
  python3 bench/taillat/run.py --workloads writeheavy --setups paio --out /tmp/wh/paio-wo-r200/r$k --no-plot --set writes_only=1 --set silk_read_mib=200 > /tmp/wh/paio-wo-r200-r$k.log 2>&1
done
echo done > /tmp/wh/DONE

#!/bin/bash
# Round-robin mixture and read-heavy runs: baseline (round 1), autotuned, paio (writes_only + read budget 200 MiB/s).
cd /work/main
for k in 1 2; do
  for w in mixture readheavy; do
    if [ $k = 1 ]; then
      python3 bench/taillat/run.py --workloads $w --setups baseline --out /tmp/mr/baseline/$w-r$k --no-plot > /tmp/mr/baseline-$w-r$k.log 2>&1
    fi
    python3 bench/taillat/run.py --workloads $w --setups autotuned --out /tmp/mr/autotuned/$w-r$k --no-plot > /tmp/mr/autotuned-$w-r$k.log 2>&1
    python3 bench/taillat/run.py --workloads $w --setups paio --out /tmp/mr/paio-wo-r200/$w-r$k --no-plot --set writes_only=1 --set silk_read_mib=200 > /tmp/mr/paio-wo-r200-$w-r$k.log 2>&1
  done
done
echo done > /tmp/mr/DONE

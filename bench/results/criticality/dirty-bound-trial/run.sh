#!/bin/bash
cd /work/main
for r in 1 2; do
  for pol in default wait overlap; do
    python3 bench/criticality/run.py --rounds 1 --setups vanilla,paio --workloads fio --paio-policy /tmp/bg-$pol.toml --out /tmp/crit-dirty/$pol-r$r > /tmp/crit-dirty/$pol-r$r.log 2>&1 || echo "FAILED $pol $r"
  done
done
echo ALLDONE

#!/bin/bash
# Interleaved A/B for the criticality experiment's fio case, one setup per
# run.py invocation, order rotated per round. OUT is the results dir.
set -u
cd /work/main
OUT=${OUT:-/tmp/ab-crit}
ROUNDS=${ROUNDS:-3}
mkdir -p $OUT
NEW=/work/main/target/release
OLD=/tmp/old-target/release
POL1=/work/main/bench/criticality/background.toml
POL3=/tmp/bgp/bd3.toml
declare -A SET=(
  [vanilla]="--setups vanilla --bin-dir $NEW"
  [bd3-d512k]="--setups paio --bin-dir $NEW --paio-policy /tmp/bgp/bd3-dirty512KiB.toml"
  [bd3-d128k]="--setups paio --bin-dir $NEW --paio-policy /tmp/bgp/bd3-dirty128KiB.toml"
  [bd3-dirty]="--setups paio --bin-dir $NEW --paio-policy /tmp/bgp/bd3-dirty.toml"
)
ORDER=(vanilla bd3-dirty bd3-d512k bd3-d128k)
for ((r=0; r<ROUNDS; r++)); do
  for ((i=0; i<${#ORDER[@]}; i++)); do
    s=${ORDER[$(( (i + r) % ${#ORDER[@]} ))]}
    python3 bench/criticality/run.py --rounds 1 --workloads fio ${SET[$s]} --out $OUT/r$r-$s > $OUT/r$r-$s.log 2>&1
    echo "round $r $s: $(grep -o 'p99.9 .*' $OUT/r$r-$s.log | head -1)"
  done
done

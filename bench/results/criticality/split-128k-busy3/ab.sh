#!/bin/bash
# The experiment's background policy with 32 KiB against 128 KiB pieces
# (busy_depth 3, 512 KiB dirty-data bound in both), beside vanilla, on one
# disk state: one setup per run.py invocation, order rotated per round.
set -u
cd "$(dirname "$0")/../../../.."
HERE=bench/results/criticality/split-128k-busy3
OUT=${OUT:?set OUT to the output directory}
ROUNDS=${ROUNDS:-3}
mkdir -p $OUT
BIN=${BIN:-$PWD/target/release}
W=${W:-fio,rocksdb,sqlite}
declare -A SET=(
  [vanilla]="--setups vanilla"
  [paio-32k]="--setups paio --paio-policy $HERE/split-32KiB.toml"
  [paio-128k]="--setups paio --paio-policy $HERE/split-128KiB.toml"
)
ORDER=(vanilla paio-32k paio-128k)
for ((r=0; r<ROUNDS; r++)); do
  for ((i=0; i<${#ORDER[@]}; i++)); do
    s=${ORDER[$(( (i + r) % ${#ORDER[@]} ))]}
    python3 bench/criticality/run.py --rounds 1 --workloads $W --bin-dir $BIN ${SET[$s]} --no-plot --out $OUT/r$r-$s > $OUT/r$r-$s.log 2>&1
    echo "$(date +%T) round $r $s done"
  done
done
echo ALLDONE

#!/bin/bash
# Both background policies side by side on one disk state, with the
# competitors, one setup per run.py invocation, order rotated per round.
set -u
cd "$(dirname "$0")/../../../.."
OUT=${OUT:?set OUT to the output directory}
ROUNDS=${ROUNDS:-3}
mkdir -p $OUT
BIN=${BIN:-$PWD/target/release}
POL1=${POL1:?the busy_depth 1 policy (bench/criticality/background.toml before this run)}
POL3=$PWD/bench/results/criticality/policies-side-by-side/busy_depth-3-dirty-512KiB.toml
W=fio,rocksdb,sqlite
declare -A SET=(
  [vanilla]="--setups vanilla"
  [ionice-bfq]="--setups ionice-bfq"
  [static]="--setups static"
  [paio-bd1]="--setups paio --paio-policy $POL1"
  [paio-bd3-dirty512k]="--setups paio --paio-policy $POL3"
)
ORDER=(vanilla paio-bd1 ionice-bfq paio-bd3-dirty512k static)
for ((r=0; r<ROUNDS; r++)); do
  for ((i=0; i<${#ORDER[@]}; i++)); do
    s=${ORDER[$(( (i + r) % ${#ORDER[@]} ))]}
    python3 bench/criticality/run.py --rounds 1 --workloads $W --bin-dir $BIN ${SET[$s]} --no-plot --out $OUT/r$r-$s > $OUT/r$r-$s.log 2>&1
    echo "$(date +%T) round $r $s done"
  done
done
echo ALLDONE

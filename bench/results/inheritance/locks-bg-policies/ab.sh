#!/bin/bash
# The inheritance experiment's locks case under three background policies,
# one run.py invocation per policy (each with its own vanilla), order
# rotated per round.
set -u
cd "$(dirname "$0")/../../../.."
OUT=${OUT:?}
ROUNDS=${ROUNDS:-3}
CASES=${CASES:-locks}
mkdir -p $OUT
declare -A POL=(
  [bd1-128k]=$PWD/bench/inheritance/background.toml
  [bd3-128k]=$PWD/bench/results/inheritance/locks-bg-policies/bd3-128k.toml
  [bd3-32k]=$PWD/bench/results/inheritance/locks-bg-policies/bd3-32k.toml
)
ORDER=(bd1-128k bd3-128k bd3-32k)
for ((r=0; r<ROUNDS; r++)); do
  for ((i=0; i<${#ORDER[@]}; i++)); do
    s=${ORDER[$(( (i + r) % ${#ORDER[@]} ))]}
    python3 bench/inheritance/run.py --rounds 1 --cases $CASES --bg-policy ${POL[$s]} --bin-dir ${BIN:-$PWD/target/release} --no-plot --out $OUT/r$r-$s > $OUT/r$r-$s.log 2>&1
    echo "$(date +%T) round $r $s done"
  done
done
echo ALLDONE

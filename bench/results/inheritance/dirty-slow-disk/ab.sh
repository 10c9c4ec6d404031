#!/bin/bash
# The inheritance experiment's dirty case with two builds of the binaries,
# one run.py invocation (its own vanilla, paio, paio-inherit, paio-overlap)
# per build, alternating: new old old new.
set -u
cd "$(dirname "$0")/../../../.."
OUT=${OUT:?}
mkdir -p $OUT
declare -A BIN=([new]=${NEW:-$PWD/target/release} [old]=${OLD:?the release directory of the older build})
i=0
for b in new old old new; do
  python3 bench/inheritance/run.py --rounds 1 --cases dirty --bin-dir ${BIN[$b]} --no-plot --out $OUT/$i-$b > $OUT/$i-$b.log 2>&1
  echo "$(date +%T) $i $b done"
  i=$((i+1))
done
echo ALLDONE

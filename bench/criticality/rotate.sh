#!/bin/bash
# Runs bench/criticality/run.py once per setup and round, the setups' order
# rotated by one each round, for comparisons run.py's own setups cannot
# express (two settings of one setup, several targets): each NAME=ARGS
# gives a setup's name and the run.py arguments that make it.
#   usage: rotate.sh OUT ROUNDS WORKLOADS NAME=ARGS...
#   e.g.   rotate.sh /tmp/out 3 fio,rocksdb vanilla="--setups vanilla" \
#              t3ms="--setups paio-target --target 3ms"
# Each run goes to OUT/r<round>-<name>/ with its log in OUT/r<round>-<name>.log;
# BIN (default target/release) holds the binaries; DRY=1 prints each run's
# command instead of running it.
set -u
if [ $# -lt 4 ]; then
  echo "usage: $0 OUT ROUNDS WORKLOADS NAME=ARGS..." >&2
  exit 2
fi
cd "$(dirname "$0")/../.."
OUT=$1 ROUNDS=$2 W=$3
shift 3
BIN=${BIN:-$PWD/target/release}
NAMES=() ARGS=()
for spec in "$@"; do
  if [[ $spec != *=* ]]; then
    echo "$0: expected NAME=ARGS, got '$spec'" >&2
    exit 2
  fi
  NAMES+=("${spec%%=*}") ARGS+=("${spec#*=}")
done
[ -n "${DRY:-}" ] || mkdir -p "$OUT"
n=${#NAMES[@]}
for ((r = 0; r < ROUNDS; r++)); do
  for ((i = 0; i < n; i++)); do
    k=$(((i + r) % n))
    name=${NAMES[$k]}
    # shellcheck disable=SC2206 # ARGS are run.py arguments, split on spaces
    cmd=(python3 bench/criticality/run.py --rounds 1 --workloads "$W" --bin-dir "$BIN"
      ${ARGS[$k]} --no-plot --out "$OUT/r$r-$name")
    if [ -n "${DRY:-}" ]; then
      echo "${cmd[*]}"
      continue
    fi
    "${cmd[@]}" > "$OUT/r$r-$name.log" 2>&1
    echo "$(date +%T) round $r $name done rc=$?"
  done
done
echo ALLDONE

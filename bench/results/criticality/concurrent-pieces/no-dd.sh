#!/bin/bash
# The mechanism alone: the criticality experiment's fio background (2
# sequential 1 MiB readers, 2 sequential 512 KiB writers, O_DIRECT, psync,
# separate processes) without its buffered dd writer, and the critical fio
# 4 KiB random reader at queue depth 1, 7 s inside 10 s of background.
# Setups rotated per round. Usage: nodd.sh ROUNDS
set -u
NEW=/work/main/target/release/paio
OLD=/tmp/old-target/release/paio
D=/var/tmp/paio-criticality
run() { # name paio-binary policy
  local n=$1 P=$2 pol=$3 wrapb=() wrapc=()
  if [ "$pol" != "-" ]; then wrapb=($P run --policy $pol --); wrapc=($P run --critical --); fi
  "${wrapb[@]}" fio --output-format=json --output=/tmp/nd-bg.json --direct=1 --ioengine=psync --time_based --runtime=10 \
    --name=readers --filename=$D/bg-read.dat --rw=read --bs=1m --numjobs=2 \
    --name=writers --filename=$D/bg-write.dat --rw=write --bs=512k --size=2048m --numjobs=2 >/dev/null &
  local p=$!
  sleep 1.5
  "${wrapc[@]}" fio --name=crit --filename=$D/crit.dat --rw=randread --bs=4k --direct=1 --ioengine=psync --time_based --runtime=7 \
      --percentile_list=50:99:99.9 --output-format=json --output=/tmp/nd-crit.json >/dev/null
  wait $p
  python3 - "$n" "$r" <<'PY'
import json,sys
n,r=sys.argv[1],sys.argv[2]
b=json.load(open("/tmp/nd-bg.json"))
bw=sum(j["read"]["bw_bytes"]+j["write"]["bw_bytes"] for j in b["jobs"])/2**20
k=json.load(open("/tmp/nd-crit.json"))["jobs"][0]["read"]
p=k["clat_ns"]["percentile"]
print(f"round {r} {n:8s} bg {bw:5.0f} MiB/s  crit p50 {p['50.000000']/1e3:6.0f} p99 {p['99.000000']/1e3:6.0f} p99.9 {p['99.900000']/1e3:6.0f} us  iops {k['iops']:.0f}", flush=True)
PY
}
NAMES=(vanilla old-bd3 new-bd1 new-bd3)
for ((r=0; r<$1; r++)); do
  for ((i=0; i<4; i++)); do
    case ${NAMES[$(( (i + r) % 4 ))]} in
      vanilla) run vanilla - - ;;
      old-bd3) run old-bd3 $OLD /tmp/bgp/bd3.toml ;;
      new-bd1) run new-bd1 $NEW /work/main/bench/criticality/background.toml ;;
      new-bd3) run new-bd3 $NEW /tmp/bgp/bd3.toml ;;
    esac
  done
done

# Run from the repository root, after run.sh: the second round at 100 MiB/s
# (the three controlled setups, order changed from round 1), then the third
# read-heavy round of ../../taillat-3rounds/trial-target-fastdisk/ at
# 200 MiB/s, kAllIo first (its round 1 had kAllIo first, round 2 paio).
set -x
R="python3 bench/taillat/run.py --set compaction_readahead_kib=256"
D=bench/results/taillat-rates/fastdisk
T=bench/results/taillat-3rounds/trial-target-fastdisk
$R --workloads mixture --set kvs_mib=100 --setups paio,autotuned_all,autotuned --out $D/mixture-100-r2
$R --workloads readheavy --setups autotuned_all --out $T/h3-kallio
$R --workloads readheavy --setups paio --out $T/h3-paio
echo ALLDONE

# Run from the repository root.
set -x
R="python3 bench/taillat/run.py --set compaction_readahead_kib=256"
$R --workloads mixture --setups autotuned_all --out bench/results/taillat-3rounds/trial-target-fastdisk/r3-kallio
$R --workloads mixture --setups paio --out bench/results/taillat-3rounds/trial-target-fastdisk/r3-paio
$R --workloads readheavy --setups paio --out bench/results/taillat-3rounds/trial-target-fastdisk/h2-paio
$R --workloads readheavy --setups autotuned_all --out bench/results/taillat-3rounds/trial-target-fastdisk/h2-kallio
$R --workloads writeheavy --setups paio --out bench/results/taillat-3rounds/trial-target-fastdisk/w2-paio
$R --workloads writeheavy --setups autotuned_all --out bench/results/taillat-3rounds/trial-target-fastdisk/w2-kallio
echo ALLDONE

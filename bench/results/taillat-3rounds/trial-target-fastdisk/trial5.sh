# Run from the repository root. The `silk_shared_read` lines need commit
# c963142: the option was reverted in 42ae07e (README.md).
set -x
R="python3 bench/taillat/run.py --set compaction_readahead_kib=256"
$R --workloads mixture --setups paio --set silk_shared_read=1 --out bench/results/taillat-3rounds/trial-target-fastdisk/r1-paio-shared
$R --workloads writeheavy --setups paio --set silk_shared_read=1 --out bench/results/taillat-3rounds/trial-target-fastdisk/w1-paio-shared
$R --workloads writeheavy --setups autotuned_all --out bench/results/taillat-3rounds/trial-target-fastdisk/w1-kallio
$R --workloads writeheavy --setups paio --out bench/results/taillat-3rounds/trial-target-fastdisk/w1-paio
$R --workloads readheavy --setups autotuned_all --out bench/results/taillat-3rounds/trial-target-fastdisk/h1-kallio
$R --workloads readheavy --setups paio --out bench/results/taillat-3rounds/trial-target-fastdisk/h1-paio
$R --workloads readheavy --setups paio --set silk_shared_read=1 --out bench/results/taillat-3rounds/trial-target-fastdisk/h1-paio-shared
echo ALLDONE

# Run from the repository root. SILK's compaction reads through a priority
# object (read_priority) instead of a DRL, paio only, mixture at 150 MiB/s
# (where the DRL's maximum was the highest of the setups, ../taillat-rates/
# fastdisk/): busy_depth 1 (RCP's) and 0, one run each, to choose the
# setting the rounds use.
set -x
R="python3 bench/taillat/run.py --workloads mixture --setups paio --set compaction_readahead_kib=256 --set kvs_mib=150"
D=bench/results/taillat-priority
$R --set silk_read_busy_depth=1 --out $D/trial-bd1
$R --set silk_read_busy_depth=0 --out $D/trial-bd0
echo ALLDONE

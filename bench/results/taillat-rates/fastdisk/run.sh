# Run from the repository root, on a disk that keeps up (pre-check: plain
# RocksDB, mixture, 200 MiB/s: r0-baseline-200/). Each rate: the four setups
# once, the order reversed between the rates. (A second round of paio
# against kAllIo at each rate was planned after these and not run: the
# time went to the slow-Get diagnosis, README.md.)
set -x
R="python3 bench/taillat/run.py --workloads mixture --set compaction_readahead_kib=256"
D=bench/results/taillat-rates/fastdisk
$R --set kvs_mib=150 --setups paio,autotuned_all,autotuned,baseline --out $D/mixture-150
$R --set kvs_mib=100 --setups baseline,autotuned,autotuned_all,paio --out $D/mixture-100
# Round 2 at 150 MiB/s (after the diagnosis), the three controlled setups in
# another order.
$R --set kvs_mib=150 --setups autotuned,autotuned_all,paio --out $D/mixture-150-r2

# Run from the repository root. rounds-150-writeheavy-budget.sh's
# configuration scaled to 200 MiB/s as rounds-200-kvs60-wp0.sh scales it
# (KVSB 120 = 60 %, read budget 200, deletions paced at 200), write-heavy,
# two rounds against kAllIo (the better mode at write-heavy at 150):
# the rate_critical fix checked at a rate it was not measured on.
set -x
python3 bench/taillat/run.py --workloads writeheavy --setups paio,autotuned_all --repeat 2 \
  --set compaction_readahead_kib=256 --set kvs_mib=200 --set silk_kvs_mib=120 --set silk_read_mib=200 \
  --set silk_read_busy_depth=0 --set silk_read_window_us=0 --set silk_read_split_kib=64 \
  --set silk_write_busy_depth=0 --set silk_write_window_us=0 \
  --set delete_rate_mib=200 \
  --out bench/results/taillat-priority/rounds-200-writeheavy-budget
echo ALLDONE

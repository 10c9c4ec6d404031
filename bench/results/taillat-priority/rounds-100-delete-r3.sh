# Run from the repository root. A third round of rounds-100-delete.sh, run
# after it as its own run (the order run.py's rotation would give round 3).
set -x
python3 bench/taillat/run.py --workloads mixture --setups autotuned_all,paio,autotuned \
  --set compaction_readahead_kib=256 --set kvs_mib=100 --set silk_kvs_mib=73 --set silk_read_mib=100 \
  --set silk_read_busy_depth=0 --set silk_read_window_us=0 --set silk_read_split_kib=64 \
  --set delete_rate_mib=100 \
  --out bench/results/taillat-priority/rounds-100-delete-r3
echo ALLDONE

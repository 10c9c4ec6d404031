# Run from the repository root. One paio run at 150 MiB/s as
# rounds-150-delete.sh (KVSB 110, compaction reads through a priority
# object) with the flush and compaction writes through priority objects
# too (paiod's write_priority, busy_depth 1, window 0): paio lost the
# backlog phase there with its compaction writes ahead of Gets in the device.
set -x
python3 bench/taillat/run.py --workloads mixture --setups paio \
  --set compaction_readahead_kib=256 --set kvs_mib=150 --set silk_kvs_mib=110 --set silk_read_mib=150 \
  --set silk_read_busy_depth=0 --set silk_read_window_us=0 --set silk_read_split_kib=64 \
  --set silk_write_busy_depth=1 --set silk_write_window_us=0 \
  --set delete_rate_mib=150 \
  --out bench/results/taillat-priority/trial-150-wp
echo ALLDONE

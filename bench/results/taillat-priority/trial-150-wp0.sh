# Run from the repository root. trial-150-wp.sh with busy_depth 0: flush
# and compaction writes admitted only while no Get is in flight (and one
# per 10 ms, the starvation guard). busy_depth 1 changed nothing in
# trial-150-wp/: a compaction is one thread with one write outstanding.
set -x
python3 bench/taillat/run.py --workloads mixture --setups paio \
  --set compaction_readahead_kib=256 --set kvs_mib=150 --set silk_kvs_mib=110 --set silk_read_mib=150 \
  --set silk_read_busy_depth=0 --set silk_read_window_us=0 --set silk_read_split_kib=64 \
  --set silk_write_busy_depth=0 --set silk_write_window_us=0 \
  --set delete_rate_mib=150 \
  --out bench/results/taillat-priority/trial-150-wp0
echo ALLDONE

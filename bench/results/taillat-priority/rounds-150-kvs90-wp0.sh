# Run from the repository root. rounds-150-kvs90.sh (KVSB 90, compaction
# reads through a priority object) with flush and compaction writes through
# priority objects too (paiod's write_priority, busy_depth 0, window 0, as
# trial-150-wp0.sh): three rounds against kWritesOnly, run.py's rotation.
set -x
python3 bench/taillat/run.py --workloads mixture --setups paio,autotuned --repeat 3 \
  --set compaction_readahead_kib=256 --set kvs_mib=150 --set silk_kvs_mib=90 --set silk_read_mib=150 \
  --set silk_read_busy_depth=0 --set silk_read_window_us=0 --set silk_read_split_kib=64 \
  --set silk_write_busy_depth=0 --set silk_write_window_us=0 \
  --set delete_rate_mib=150 \
  --out bench/results/taillat-priority/rounds-150-kvs90-wp0
echo ALLDONE

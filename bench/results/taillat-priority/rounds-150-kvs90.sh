# Run from the repository root. rounds-150-delete.sh with SILK's KVSB at
# 90 MiB/s (60 % of the device) instead of 110 (73 %), after
# trial-150-kvs90.sh: three rounds against kWritesOnly, the limiter's
# better mode at 150 MiB/s with pacing (rounds-150-delete/), run.py's
# rotation.
set -x
python3 bench/taillat/run.py --workloads mixture --setups paio,autotuned --repeat 3 \
  --set compaction_readahead_kib=256 --set kvs_mib=150 --set silk_kvs_mib=90 --set silk_read_mib=150 \
  --set silk_read_busy_depth=0 --set silk_read_window_us=0 --set silk_read_split_kib=64 \
  --set delete_rate_mib=150 \
  --out bench/results/taillat-priority/rounds-150-kvs90
echo ALLDONE

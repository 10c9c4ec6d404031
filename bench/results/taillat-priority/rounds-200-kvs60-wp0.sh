# Run from the repository root. The configuration of rounds-150-kvs90-wp0.sh
# (KVSB 60 % of the device, compaction reads and writes through priority
# objects, busy depth 0, no window, reads in 64 KiB pieces; obsolete SST
# files deleted at the device's rate in EVERY setup) at 200 MiB/s, mixture
# and read-heavy: three rounds against kWritesOnly (not yet run paced at
# 200; kAllIo is in rounds-200-delete/), run.py's rotation.
set -x
python3 bench/taillat/run.py --workloads mixture,readheavy --setups paio,autotuned --repeat 3 \
  --set compaction_readahead_kib=256 --set kvs_mib=200 --set silk_kvs_mib=120 --set silk_read_mib=200 \
  --set silk_read_busy_depth=0 --set silk_read_window_us=0 --set silk_read_split_kib=64 \
  --set silk_write_busy_depth=0 --set silk_write_window_us=0 \
  --set delete_rate_mib=200 \
  --out bench/results/taillat-priority/rounds-200-kvs60-wp0
echo ALLDONE

# Run from the repository root. The configuration that met the goal at
# 100 MiB/s (rounds-100-delete*.sh: compaction reads through a priority
# object, busy depth 0, no window, 64 KiB pieces; KVSB 73 % of the device;
# obsolete SST files deleted at the device's rate in EVERY setup) at
# 150 MiB/s: three rounds, run.py's rotation, then plain RocksDB once.
set -x
python3 bench/taillat/run.py --workloads mixture --setups paio,autotuned,autotuned_all --repeat 3 \
  --set compaction_readahead_kib=256 --set kvs_mib=150 --set silk_kvs_mib=110 --set silk_read_mib=150 \
  --set silk_read_busy_depth=0 --set silk_read_window_us=0 --set silk_read_split_kib=64 \
  --set delete_rate_mib=150 \
  --out bench/results/taillat-priority/rounds-150-delete
python3 bench/taillat/run.py --workloads mixture --setups baseline \
  --set compaction_readahead_kib=256 --set kvs_mib=150 --set delete_rate_mib=150 \
  --out bench/results/taillat-priority/baseline-150-delete
echo ALLDONE

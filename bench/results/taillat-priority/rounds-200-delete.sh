# Run from the repository root. The configuration of rounds-100-delete.sh
# and rounds-150-delete.sh (compaction reads through a priority object,
# busy depth 0, no window, 64 KiB pieces; KVSB 73 % of the device;
# obsolete SST files deleted at the device's rate in EVERY setup) at
# 200 MiB/s, the rate SILK's configuration was first tuned on, in the two
# workloads where paio was not below the limiter there (mixture, a tie;
# read-heavy, above by the median): three rounds against kAllIo, the
# limiter's better mode at 200 MiB/s (../taillat-3rounds/), run.py's
# rotation.
set -x
python3 bench/taillat/run.py --workloads readheavy,mixture --setups paio,autotuned_all --repeat 3 \
  --set compaction_readahead_kib=256 --set kvs_mib=200 --set silk_kvs_mib=146 --set silk_read_mib=200 \
  --set silk_read_busy_depth=0 --set silk_read_window_us=0 --set silk_read_split_kib=64 \
  --set delete_rate_mib=200 \
  --out bench/results/taillat-priority/rounds-200-delete
echo ALLDONE

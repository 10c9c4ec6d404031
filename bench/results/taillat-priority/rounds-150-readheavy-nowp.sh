# Run from the repository root. After trial-150-readheavy-l0.sh (paio without
# write priority at 0.92 ms in one run): two more rounds of that
# configuration (KVSB 90, compaction reads through a priority object, busy
# depth 0, no window, 64 KiB; compaction writes through silk's DRLs)
# against kWritesOnly, run.py's rotation.
set -x
python3 bench/taillat/run.py --workloads readheavy --setups paio,autotuned --repeat 2 \
  --set compaction_readahead_kib=256 --set kvs_mib=150 --set silk_kvs_mib=90 --set silk_read_mib=150 \
  --set silk_read_busy_depth=0 --set silk_read_window_us=0 --set silk_read_split_kib=64 \
  --set delete_rate_mib=150 \
  --out bench/results/taillat-priority/rounds-150-readheavy-nowp
echo ALLDONE

# Run from the repository root. rounds-150-writeheavy.sh again, three
# rounds, after silk's priority objects set rate_critical (the allocation
# holds for requests the plugin makes critical during write stalls; its
# stall inheritance stays on, its default). Against kAllIo, the better mode
# at write-heavy (0.92 and 1.16 ms against kWritesOnly's 44.20 and 46.72),
# and kWritesOnly.
set -x
python3 bench/taillat/run.py --workloads writeheavy --setups paio,autotuned_all,autotuned --repeat 3 \
  --set compaction_readahead_kib=256 --set kvs_mib=150 --set silk_kvs_mib=90 --set silk_read_mib=150 \
  --set silk_read_busy_depth=0 --set silk_read_window_us=0 --set silk_read_split_kib=64 \
  --set silk_write_busy_depth=0 --set silk_write_window_us=0 \
  --set delete_rate_mib=150 \
  --out bench/results/taillat-priority/rounds-150-writeheavy-budget
echo ALLDONE

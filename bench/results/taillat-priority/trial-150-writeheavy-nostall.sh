# Run from the repository root. rounds-150-writeheavy.sh's paio setup, one
# run, with the plugin's stall inheritance off (critical_during_stalls =
# false): does the burst at L0's slowdown trigger (t = 16-20, flush and L0
# compaction critical, so past their priority objects' rate) go away?
set -x
python3 bench/taillat/run.py --workloads writeheavy --setups paio \
  --set compaction_readahead_kib=256 --set kvs_mib=150 --set silk_kvs_mib=90 --set silk_read_mib=150 \
  --set silk_read_busy_depth=0 --set silk_read_window_us=0 --set silk_read_split_kib=64 \
  --set silk_write_busy_depth=0 --set silk_write_window_us=0 \
  --set delete_rate_mib=150 --set paio_stall_critical=0 \
  --out bench/results/taillat-priority/trial-150-writeheavy-nostall
echo ALLDONE

# Run from the repository root. As rounds-100.sh, with obsolete SST files
# deleted at 100 MiB/s in 4 MiB pieces in EVERY setup (RocksDB's
# SstFileManager, --set delete_rate_mib=100), since paio's slow seconds in
# rounds-100/ were bursts of discards. Two rounds (time).
set -x
python3 bench/taillat/run.py --workloads mixture --setups paio,autotuned,autotuned_all --repeat 2 \
  --set compaction_readahead_kib=256 --set kvs_mib=100 --set silk_kvs_mib=73 --set silk_read_mib=100 \
  --set silk_read_busy_depth=0 --set silk_read_window_us=0 --set silk_read_split_kib=64 \
  --set delete_rate_mib=100 \
  --out bench/results/taillat-priority/rounds-100-delete
echo ALLDONE

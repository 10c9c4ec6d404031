# Run from the repository root. One paio run at 150 MiB/s as
# rounds-150-delete.sh but with SILK's KVSB at 90 MiB/s (60 % of the
# device) instead of 110 (73 %): paio lost the backlog phase there while
# compacting at ~97 MiB/s where the auto-tuned limiter compacts at 70-80.
set -x
python3 bench/taillat/run.py --workloads mixture --setups paio \
  --set compaction_readahead_kib=256 --set kvs_mib=150 --set silk_kvs_mib=90 --set silk_read_mib=150 \
  --set silk_read_busy_depth=0 --set silk_read_window_us=0 --set silk_read_split_kib=64 \
  --set delete_rate_mib=150 \
  --out bench/results/taillat-priority/trial-150-kvs90
echo ALLDONE

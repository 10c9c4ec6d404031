# Run from the repository root. Read-heavy at 150 MiB/s, paced: is paio's
# slow start (rounds-150-readheavy/: its worst seconds at 7-15 s, with 18
# L0 files that it drains ~10 s later than the limiter) the L0 compaction
# waiting behind Gets? One paio run each: (a) without write priority (the
# compaction writes through silk's DRLs), (b) with it but one compaction
# read allowed in flight beside Gets (read busy_depth 1).
set -x
python3 bench/taillat/run.py --workloads readheavy --setups paio \
  --set compaction_readahead_kib=256 --set kvs_mib=150 --set silk_kvs_mib=90 --set silk_read_mib=150 \
  --set silk_read_busy_depth=0 --set silk_read_window_us=0 --set silk_read_split_kib=64 \
  --set delete_rate_mib=150 \
  --out bench/results/taillat-priority/trial-150-readheavy-l0/no-write-priority
python3 bench/taillat/run.py --workloads readheavy --setups paio \
  --set compaction_readahead_kib=256 --set kvs_mib=150 --set silk_kvs_mib=90 --set silk_read_mib=150 \
  --set silk_read_busy_depth=1 --set silk_read_window_us=0 --set silk_read_split_kib=64 \
  --set silk_write_busy_depth=0 --set silk_write_window_us=0 \
  --set delete_rate_mib=150 \
  --out bench/results/taillat-priority/trial-150-readheavy-l0/read-busy1
echo ALLDONE

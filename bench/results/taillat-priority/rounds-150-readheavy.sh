# Run from the repository root. Read-heavy at 150 MiB/s, deletions paced in
# every setup, with the configuration of rounds-150-kvs90-wp0.sh (KVSB 90,
# compaction reads and writes through priority objects, busy depth 0, no
# window, 64 KiB read pieces): three rounds against both limiter modes,
# run.py's rotation. The rate's mixture and write-heavy rounds are in
# rounds-150-kvs90-wp0/ and rounds-150-writeheavy-budget/.
set -x
python3 bench/taillat/run.py --workloads readheavy --setups paio,autotuned,autotuned_all --repeat 3 \
  --set compaction_readahead_kib=256 --set kvs_mib=150 --set silk_kvs_mib=90 --set silk_read_mib=150 \
  --set silk_read_busy_depth=0 --set silk_read_window_us=0 --set silk_read_split_kib=64 \
  --set silk_write_busy_depth=0 --set silk_write_window_us=0 \
  --set delete_rate_mib=150 \
  --out bench/results/taillat-priority/rounds-150-readheavy
echo ALLDONE

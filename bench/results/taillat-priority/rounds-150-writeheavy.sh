# Run from the repository root. Write-heavy at 150 MiB/s with deletions
# paced in every setup (not run paced before), the configuration of
# rounds-150-kvs90-wp0.sh (KVSB 60 %, compaction reads and writes through
# priority objects): two rounds of paio against both of the auto-tuned
# limiter's modes, run.py's rotation.
set -x
python3 bench/taillat/run.py --workloads writeheavy --setups paio,autotuned,autotuned_all --repeat 2 \
  --set compaction_readahead_kib=256 --set kvs_mib=150 --set silk_kvs_mib=90 --set silk_read_mib=150 \
  --set silk_read_busy_depth=0 --set silk_read_window_us=0 --set silk_read_split_kib=64 \
  --set silk_write_busy_depth=0 --set silk_write_window_us=0 \
  --set delete_rate_mib=150 \
  --out bench/results/taillat-priority/rounds-150-writeheavy
echo ALLDONE

# Run from the repository root. Plain RocksDB (no limiter) under the same
# throttle and deletion pacing as rounds-100-delete*.sh, for the goal's
# ">= 4x below RocksDB" (one run).
set -x
python3 bench/taillat/run.py --workloads mixture --setups baseline \
  --set compaction_readahead_kib=256 --set kvs_mib=100 --set delete_rate_mib=100 \
  --out bench/results/taillat-priority/baseline-100-delete
echo ALLDONE

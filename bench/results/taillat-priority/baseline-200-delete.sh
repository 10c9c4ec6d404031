# Run from the repository root. Plain RocksDB (no limiter) under the same
# throttle and deletion pacing as rounds-200-kvs60-wp0.sh, for the goal's
# ">= 4x below RocksDB" at 200 MiB/s paced (one run per workload).
set -x
python3 bench/taillat/run.py --workloads mixture,readheavy --setups baseline \
  --set compaction_readahead_kib=256 --set kvs_mib=200 --set delete_rate_mib=200 \
  --out bench/results/taillat-priority/baseline-200-delete
echo ALLDONE

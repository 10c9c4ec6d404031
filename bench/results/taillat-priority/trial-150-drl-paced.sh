# Run from the repository root. Ablation, one paio run: SILK's shipped
# configuration (policies/paiod/silk.toml: KVSB at the device's rate, the
# compaction reads' DRL with 256 KiB pieces, no priority object) at
# 150 MiB/s with deletions paced as in rounds-150-delete.sh, to tell what
# the pacing alone gives paio from what read_priority and KVSB 73 % add.
set -x
python3 bench/taillat/run.py --workloads mixture --setups paio \
  --set compaction_readahead_kib=256 --set kvs_mib=150 --set silk_read_mib=150 \
  --set silk_read_split_kib=256 --set delete_rate_mib=150 \
  --out bench/results/taillat-priority/trial-150-drl-paced
echo ALLDONE

# Run from the repository root. Smaller compaction read pieces (SILK's
# read_split) and headroom under the device rate (read budget), paio only,
# mixture at 150 MiB/s, where paio's maximum was the highest of the setups
# (../fastdisk/mixture-150/). One run each.
set -x
R="python3 bench/taillat/run.py --workloads mixture --setups paio --set compaction_readahead_kib=256 --set kvs_mib=150"
D=bench/results/taillat-rates/fastdisk-split
$R --set silk_read_split_kib=32 --out $D/split32
$R --set silk_read_split_kib=64 --out $D/split64
$R --set silk_read_mib=128 --out $D/read128
echo ALLDONE

# Run from the repository root. SILK's compaction reads through a priority
# object (read_priority) instead of a DRL, paio only, mixture at 150 MiB/s
# (where the DRL's maximum was the highest of the setups, ../taillat-rates/
# fastdisk/), one run each, to choose the setting the rounds use:
# busy_depth 1 (RCP's; window 2 ms), then busy_depth 0 with window 0 (a
# compaction read waits only while a Get's read is in flight or waiting),
# in 64 and 256 KiB pieces. (busy_depth 0 with the 2 ms window was started
# and stopped after 10 s: Gets keep critical I/O active all the time, so
# compaction reads ran at the starvation guard's 25 MiB/s, one 256 KiB
# piece per 10 ms.)
set -x
R="python3 bench/taillat/run.py --workloads mixture --setups paio --set compaction_readahead_kib=256 --set kvs_mib=150"
D=bench/results/taillat-priority
[ -d $D/trial-bd1 ] || $R --set silk_read_busy_depth=1 --out $D/trial-bd1
$R --set silk_read_busy_depth=0 --set silk_read_window_us=0 --set silk_read_split_kib=64 --out $D/trial-bd0-w0-s64
$R --set silk_read_busy_depth=0 --set silk_read_window_us=0 --out $D/trial-bd0-w0-s256
echo ALLDONE

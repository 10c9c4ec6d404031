# Run from the repository root. At 150 MiB/s paio's later valleys (after the
# peaks) stayed above RocksDB's kWritesOnly limiter's in every run (1.6-2.2
# against 1.15-1.57 ms), and there SILK gives compaction writes up to
# KVSB - Fg (~145 MiB/s, peak writes 139 MiB/s) where the auto-tuned limiter
# lets ~100 through. So: SILK's KVSB at 110 MiB/s (writes' budget; the read
# budget stays at the device's 150), with the compaction reads' DRL and with
# the priority object (busy_depth 0, window 0, 64 KiB), one run each.
set -x
R="python3 bench/taillat/run.py --workloads mixture --setups paio --set compaction_readahead_kib=256 --set kvs_mib=150 --set silk_kvs_mib=110 --set silk_read_mib=150"
D=bench/results/taillat-priority
$R --out $D/trial-kvs110-drl
$R --set silk_read_busy_depth=0 --set silk_read_window_us=0 --set silk_read_split_kib=64 --out $D/trial-kvs110-bd0-w0-s64
echo ALLDONE

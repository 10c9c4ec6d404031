/work/main/target/release/paiod --config bench/results/taillat-3rounds/trial-target-fastdisk/r2-paio/mixture/paio/paiod.toml --socket /tmp/paio-taillat-kjxz2g6c/paiod.sock

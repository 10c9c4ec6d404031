/work/main/target/release/paiod --config bench/results/taillat-3rounds/trial-target-fastdisk/r3-paio/mixture/paio/paiod.toml --socket /tmp/paio-taillat-4ksfczq1/paiod.sock

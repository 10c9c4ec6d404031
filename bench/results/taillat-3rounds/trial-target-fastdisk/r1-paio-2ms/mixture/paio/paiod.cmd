/work/main/target/release/paiod --config bench/results/taillat-3rounds/trial-target-fastdisk/r1-paio-2ms/mixture/paio/paiod.toml --socket /tmp/paio-taillat-g0a40u8l/paiod.sock

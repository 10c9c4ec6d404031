/work/main/target/release/paiod --config bench/results/taillat-3rounds/trial-target-fastdisk/r1-paio-shared/mixture/paio/paiod.toml --socket /tmp/paio-taillat-gqy6f2x9/paiod.sock

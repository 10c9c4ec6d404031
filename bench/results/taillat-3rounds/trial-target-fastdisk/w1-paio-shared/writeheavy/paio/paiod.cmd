/work/main/target/release/paiod --config bench/results/taillat-3rounds/trial-target-fastdisk/w1-paio-shared/writeheavy/paio/paiod.toml --socket /tmp/paio-taillat-uhx5pfjv/paiod.sock

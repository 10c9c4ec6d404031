/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-200-kvs60-wp0/readheavy/paio/run1/paiod.toml --socket /tmp/paio-taillat-d6hwul9z/paiod.sock

/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-200-kvs60-wp0/mixture/paio/run2/paiod.toml --socket /tmp/paio-taillat-elnp0tqj/paiod.sock

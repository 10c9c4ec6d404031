/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-150-kvs90-wp0/mixture/paio/run1/paiod.toml --socket /tmp/paio-taillat-38ibz3kb/paiod.sock

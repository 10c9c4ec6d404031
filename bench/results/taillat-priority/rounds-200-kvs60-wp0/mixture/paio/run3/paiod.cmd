/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-200-kvs60-wp0/mixture/paio/run3/paiod.toml --socket /tmp/paio-taillat-7386ryyu/paiod.sock

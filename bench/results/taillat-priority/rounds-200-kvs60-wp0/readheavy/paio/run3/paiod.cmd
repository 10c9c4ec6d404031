/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-200-kvs60-wp0/readheavy/paio/run3/paiod.toml --socket /tmp/paio-taillat-qwhuucug/paiod.sock

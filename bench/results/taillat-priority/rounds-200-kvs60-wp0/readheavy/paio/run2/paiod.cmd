/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-200-kvs60-wp0/readheavy/paio/run2/paiod.toml --socket /tmp/paio-taillat-vv4fvlia/paiod.sock

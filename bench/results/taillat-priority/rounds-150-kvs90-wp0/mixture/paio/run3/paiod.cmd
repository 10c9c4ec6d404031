/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-150-kvs90-wp0/mixture/paio/run3/paiod.toml --socket /tmp/paio-taillat-0acd72df/paiod.sock

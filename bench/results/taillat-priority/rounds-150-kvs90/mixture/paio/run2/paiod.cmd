/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-150-kvs90/mixture/paio/run2/paiod.toml --socket /tmp/paio-taillat-1zxi0dns/paiod.sock

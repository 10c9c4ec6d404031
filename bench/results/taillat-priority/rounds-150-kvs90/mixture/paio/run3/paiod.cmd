/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-150-kvs90/mixture/paio/run3/paiod.toml --socket /tmp/paio-taillat-loqcj04r/paiod.sock

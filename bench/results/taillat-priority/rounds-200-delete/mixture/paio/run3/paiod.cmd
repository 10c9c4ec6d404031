/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-200-delete/mixture/paio/run3/paiod.toml --socket /tmp/paio-taillat-07wc6wbo/paiod.sock

/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-200-delete/mixture/paio/run2/paiod.toml --socket /tmp/paio-taillat-38ht69tn/paiod.sock

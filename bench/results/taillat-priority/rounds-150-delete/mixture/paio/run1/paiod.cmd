/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-150-delete/mixture/paio/run1/paiod.toml --socket /tmp/paio-taillat-tryw8239/paiod.sock

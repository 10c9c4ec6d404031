/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-200-delete/readheavy/paio/run1/paiod.toml --socket /tmp/paio-taillat-by_w4hu9/paiod.sock

/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-200-delete/readheavy/paio/run2/paiod.toml --socket /tmp/paio-taillat-pw307dlm/paiod.sock

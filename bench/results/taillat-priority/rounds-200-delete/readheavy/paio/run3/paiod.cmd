/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-200-delete/readheavy/paio/run3/paiod.toml --socket /tmp/paio-taillat-4z3ui73e/paiod.sock

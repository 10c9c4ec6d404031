/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-150-readheavy/readheavy/paio/run1/paiod.toml --socket /tmp/paio-taillat-6hbp4rm3/paiod.sock

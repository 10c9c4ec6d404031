/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-150-readheavy/readheavy/paio/run2/paiod.toml --socket /tmp/paio-taillat-5m5dhhut/paiod.sock

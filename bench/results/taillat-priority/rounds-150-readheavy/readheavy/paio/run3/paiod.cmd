/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-150-readheavy/readheavy/paio/run3/paiod.toml --socket /tmp/paio-taillat-_rs246x3/paiod.sock

/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-150-readheavy-nowp/readheavy/paio/run2/paiod.toml --socket /tmp/paio-taillat-9byp9r1_/paiod.sock

/work/main/target/release/paiod --config bench/results/taillat-3rounds/readheavy/readheavy/paio/run1/paiod.toml --socket /tmp/paio-taillat-6794sr0k/paiod.sock

/work/main/target/release/paiod --config bench/results/taillat-3rounds/readheavy/readheavy/paio/run2/paiod.toml --socket /tmp/paio-taillat-sduk370c/paiod.sock

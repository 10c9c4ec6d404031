/work/main/target/release/paiod --config bench/results/taillat-3rounds/writeheavy/writeheavy/paio/run2/paiod.toml --socket /tmp/paio-taillat-78kxw5_6/paiod.sock

/work/main/target/release/paiod --config bench/results/taillat-3rounds/writeheavy/writeheavy/paio/run3/paiod.toml --socket /tmp/paio-taillat-k9ls0g5a/paiod.sock

/work/main/target/release/paiod --config bench/results/taillat-writeheavy-repeat/writeheavy/paio/paiod.toml --socket /tmp/paio-taillat-2b3gxg6i/paiod.sock

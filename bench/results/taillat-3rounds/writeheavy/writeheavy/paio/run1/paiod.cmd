/work/main/target/release/paiod --config bench/results/taillat-3rounds/writeheavy/writeheavy/paio/run1/paiod.toml --socket /tmp/paio-taillat-ofg9bw3o/paiod.sock

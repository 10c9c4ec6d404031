/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-150-writeheavy/writeheavy/paio/run1/paiod.toml --socket /tmp/paio-taillat-83aigsfh/paiod.sock

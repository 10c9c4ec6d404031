/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-200-writeheavy-budget/writeheavy/paio/run1/paiod.toml --socket /tmp/paio-taillat-sc1ln7w6/paiod.sock

/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-150-writeheavy-budget/writeheavy/paio/run1/paiod.toml --socket /tmp/paio-taillat-r_pvcrvm/paiod.sock

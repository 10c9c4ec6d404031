/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-200-writeheavy-budget/writeheavy/paio/run2/paiod.toml --socket /tmp/paio-taillat-1b0x_lqw/paiod.sock

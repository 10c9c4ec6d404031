/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-150-writeheavy-budget/writeheavy/paio/run2/paiod.toml --socket /tmp/paio-taillat-p0e719pe/paiod.sock

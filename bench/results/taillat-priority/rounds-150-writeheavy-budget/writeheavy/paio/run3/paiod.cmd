/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-150-writeheavy-budget/writeheavy/paio/run3/paiod.toml --socket /tmp/paio-taillat-l903lmmh/paiod.sock

/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-150-writeheavy/writeheavy/paio/run2/paiod.toml --socket /tmp/paio-taillat-zist_swi/paiod.sock

/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-200-delete/mixture/paio/run1/paiod.toml --socket /tmp/paio-taillat-37w9x47v/paiod.sock

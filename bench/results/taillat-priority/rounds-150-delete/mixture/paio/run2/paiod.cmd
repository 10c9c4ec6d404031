/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-150-delete/mixture/paio/run2/paiod.toml --socket /tmp/paio-taillat-8lt4yrnq/paiod.sock

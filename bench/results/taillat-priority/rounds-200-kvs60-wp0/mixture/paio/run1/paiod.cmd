/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-200-kvs60-wp0/mixture/paio/run1/paiod.toml --socket /tmp/paio-taillat-rm3eg8ue/paiod.sock

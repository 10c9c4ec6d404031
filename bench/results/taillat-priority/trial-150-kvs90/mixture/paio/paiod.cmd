/work/main/target/release/paiod --config bench/results/taillat-priority/trial-150-kvs90/mixture/paio/paiod.toml --socket /tmp/paio-taillat-8fkxbrlo/paiod.sock

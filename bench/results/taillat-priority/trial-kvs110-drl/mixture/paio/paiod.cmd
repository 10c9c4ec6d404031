/work/main/target/release/paiod --config bench/results/taillat-priority/trial-kvs110-drl/mixture/paio/paiod.toml --socket /tmp/paio-taillat-gc4d7ghs/paiod.sock

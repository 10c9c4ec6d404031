/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-150-kvs90-wp0/mixture/paio/run2/paiod.toml --socket /tmp/paio-taillat-lxupqe2_/paiod.sock

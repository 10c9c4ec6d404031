/work/main/target/release/paiod --config bench/results/taillat-rates/mixture-150/mixture/paio/paiod.toml --socket /tmp/paio-taillat-b33bq2o1/paiod.sock

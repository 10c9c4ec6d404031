/work/main/target/release/paiod --config bench/results/taillat-rates/mixture-100/mixture/paio/paiod.toml --socket /tmp/paio-taillat-42vym62w/paiod.sock

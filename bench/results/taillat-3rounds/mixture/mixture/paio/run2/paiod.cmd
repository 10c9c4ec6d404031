/work/main/target/release/paiod --config bench/results/taillat-3rounds/mixture/mixture/paio/run2/paiod.toml --socket /tmp/paio-taillat-hc9w7oiq/paiod.sock

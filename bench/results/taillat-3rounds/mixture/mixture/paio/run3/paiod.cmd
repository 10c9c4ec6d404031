/work/main/target/release/paiod --config bench/results/taillat-3rounds/mixture/mixture/paio/run3/paiod.toml --socket /tmp/paio-taillat-icmc6fpe/paiod.sock

/work/main/target/release/paiod --config bench/results/taillat-3rounds/mixture-ra256/mixture/paio/run1/paiod.toml --socket /tmp/paio-taillat-5qlhwpm6/paiod.sock

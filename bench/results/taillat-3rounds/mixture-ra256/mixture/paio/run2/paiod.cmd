/work/main/target/release/paiod --config bench/results/taillat-3rounds/mixture-ra256/mixture/paio/run2/paiod.toml --socket /tmp/paio-taillat-en88unxb/paiod.sock

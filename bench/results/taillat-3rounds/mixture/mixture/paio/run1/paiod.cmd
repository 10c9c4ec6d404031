/work/main/target/release/paiod --config bench/results/taillat-3rounds/mixture/mixture/paio/run1/paiod.toml --socket /tmp/paio-taillat-fy_5lgxb/paiod.sock

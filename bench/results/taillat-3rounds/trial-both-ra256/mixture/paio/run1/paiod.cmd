/work/main/target/release/paiod --config bench/results/taillat-3rounds/trial-both-ra256/mixture/paio/run1/paiod.toml --socket /tmp/paio-taillat-qi4zj_r9/paiod.sock

/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-100/mixture/paio/run1/paiod.toml --socket /tmp/paio-taillat-p0z2_mfq/paiod.sock

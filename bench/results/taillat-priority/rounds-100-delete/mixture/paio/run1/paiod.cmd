/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-100-delete/mixture/paio/run1/paiod.toml --socket /tmp/paio-taillat-s_yplo7f/paiod.sock

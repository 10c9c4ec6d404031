/work/main/target/release/paiod --config bench/results/taillat-priority/trial-bd1/mixture/paio/paiod.toml --socket /tmp/paio-taillat-rfiac6n9/paiod.sock

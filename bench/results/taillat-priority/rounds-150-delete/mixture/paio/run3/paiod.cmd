/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-150-delete/mixture/paio/run3/paiod.toml --socket /tmp/paio-taillat-3_m7e1fu/paiod.sock

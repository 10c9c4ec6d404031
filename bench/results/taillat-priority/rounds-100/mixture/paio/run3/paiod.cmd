/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-100/mixture/paio/run3/paiod.toml --socket /tmp/paio-taillat-0m8f4no1/paiod.sock

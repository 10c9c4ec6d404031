/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-100/mixture/paio/run2/paiod.toml --socket /tmp/paio-taillat-8mby8ypb/paiod.sock

/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-150-kvs90/mixture/paio/run1/paiod.toml --socket /tmp/paio-taillat-xqn36cup/paiod.sock

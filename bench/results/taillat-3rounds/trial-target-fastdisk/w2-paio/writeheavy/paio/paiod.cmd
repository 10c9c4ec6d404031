/work/main/target/release/paiod --config bench/results/taillat-3rounds/trial-target-fastdisk/w2-paio/writeheavy/paio/paiod.toml --socket /tmp/paio-taillat-ovi720ar/paiod.sock

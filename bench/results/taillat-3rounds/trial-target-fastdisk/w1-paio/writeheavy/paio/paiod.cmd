/work/main/target/release/paiod --config bench/results/taillat-3rounds/trial-target-fastdisk/w1-paio/writeheavy/paio/paiod.toml --socket /tmp/paio-taillat-mmytl781/paiod.sock

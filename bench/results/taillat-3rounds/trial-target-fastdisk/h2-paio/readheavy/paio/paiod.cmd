/work/main/target/release/paiod --config bench/results/taillat-3rounds/trial-target-fastdisk/h2-paio/readheavy/paio/paiod.toml --socket /tmp/paio-taillat-c9vd81b4/paiod.sock

/work/main/target/release/paiod --config bench/results/taillat-3rounds/trial-target-fastdisk/h3-paio/readheavy/paio/paiod.toml --socket /tmp/paio-taillat-a612fwrb/paiod.sock

/work/main/target/release/paiod --config bench/results/taillat-3rounds/trial-target-fastdisk/h1-paio/readheavy/paio/paiod.toml --socket /tmp/paio-taillat-49huj1ua/paiod.sock

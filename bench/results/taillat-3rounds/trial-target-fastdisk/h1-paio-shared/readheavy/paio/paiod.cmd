/work/main/target/release/paiod --config bench/results/taillat-3rounds/trial-target-fastdisk/h1-paio-shared/readheavy/paio/paiod.toml --socket /tmp/paio-taillat-p9h3brwr/paiod.sock

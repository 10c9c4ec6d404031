/work/main/target/release/paiod --config bench/results/taillat-rates/fastdisk-split/split64/mixture/paio/paiod.toml --socket /tmp/paio-taillat-khdggu_v/paiod.sock

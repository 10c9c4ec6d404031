/work/main/target/release/paiod --config bench/results/taillat-rates/fastdisk-split/split32/mixture/paio/paiod.toml --socket /tmp/paio-taillat-za8qu8g9/paiod.sock

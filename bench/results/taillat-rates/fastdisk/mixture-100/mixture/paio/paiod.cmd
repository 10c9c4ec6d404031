/work/main/target/release/paiod --config bench/results/taillat-rates/fastdisk/mixture-100/mixture/paio/paiod.toml --socket /tmp/paio-taillat-276bzw54/paiod.sock

/work/main/target/release/paiod --config bench/results/taillat-rates/fastdisk/mixture-100-r2/mixture/paio/paiod.toml --socket /tmp/paio-taillat-f6gkck02/paiod.sock

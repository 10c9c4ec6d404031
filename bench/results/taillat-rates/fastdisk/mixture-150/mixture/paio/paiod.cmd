/work/main/target/release/paiod --config bench/results/taillat-rates/fastdisk/mixture-150/mixture/paio/paiod.toml --socket /tmp/paio-taillat-1wqh4sc8/paiod.sock

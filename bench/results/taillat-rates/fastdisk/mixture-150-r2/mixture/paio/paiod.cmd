/work/main/target/release/paiod --config bench/results/taillat-rates/fastdisk/mixture-150-r2/mixture/paio/paiod.toml --socket /tmp/paio-taillat-p5d15cg9/paiod.sock

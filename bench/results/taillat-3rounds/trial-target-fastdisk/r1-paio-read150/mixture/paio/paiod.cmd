/work/main/target/release/paiod --config bench/results/taillat-3rounds/trial-target-fastdisk/r1-paio-read150/mixture/paio/paiod.toml --socket /tmp/paio-taillat-4wz0llf2/paiod.sock

/work/main/target/release/paiod --config bench/results/taillat-3rounds/trial-target-fastdisk/r1-paio-together/mixture/paio/paiod.toml --socket /tmp/paio-taillat-bij5xng4/paiod.sock

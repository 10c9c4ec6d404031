/work/main/target/release/paiod --config bench/results/taillat-3rounds/trial-target-fastdisk/r1-kallio-paio/mixture/paio/paiod.toml --socket /tmp/paio-taillat-7qnn21o0/paiod.sock

/work/main/target/release/paiod --config bench/results/taillat-3rounds/trial-target-fastdisk/r1-paio-read120/mixture/paio/paiod.toml --socket /tmp/paio-taillat-pw0fq7lg/paiod.sock

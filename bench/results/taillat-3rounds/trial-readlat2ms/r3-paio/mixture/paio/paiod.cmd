/work/main/target/release/paiod --config bench/results/taillat-3rounds/trial-readlat2ms/r3-paio/mixture/paio/paiod.toml --socket /tmp/paio-taillat-sxqv_2gw/paiod.sock

/work/main/target/release/paiod --config bench/results/taillat-3rounds/trial-readlat2ms/r1-paio-target/mixture/paio/paiod.toml --socket /tmp/paio-taillat-3co_n858/paiod.sock

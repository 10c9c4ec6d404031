/work/main/target/release/paiod --config bench/results/taillat-3rounds/trial-readlat2ms/r2-paio/mixture/paio/paiod.toml --socket /tmp/paio-taillat-xpuvxoqc/paiod.sock

/work/main/target/release/paiod --config bench/results/taillat-3rounds/trial-readlat2ms/r1-paio/mixture/paio/paiod.toml --socket /tmp/paio-taillat-yrm7up73/paiod.sock

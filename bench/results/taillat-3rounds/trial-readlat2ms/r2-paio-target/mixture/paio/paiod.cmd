/work/main/target/release/paiod --config bench/results/taillat-3rounds/trial-readlat2ms/r2-paio-target/mixture/paio/paiod.toml --socket /tmp/paio-taillat-7tvgq1zh/paiod.sock

/work/main/target/release/paiod --config bench/results/taillat-3rounds/trial-readlat2ms/r3-paio-target20/mixture/paio/paiod.toml --socket /tmp/paio-taillat-kazxp3hl/paiod.sock

/work/main/target/release/paiod --config bench/results/taillat-priority/trial-150-wp0/mixture/paio/paiod.toml --socket /tmp/paio-taillat-mpfbo44n/paiod.sock

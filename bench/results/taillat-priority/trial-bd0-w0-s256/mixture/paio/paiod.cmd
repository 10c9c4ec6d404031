/work/main/target/release/paiod --config bench/results/taillat-priority/trial-bd0-w0-s256/mixture/paio/paiod.toml --socket /tmp/paio-taillat-kbs9o067/paiod.sock

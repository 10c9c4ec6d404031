/work/main/target/release/paiod --config bench/results/taillat-priority/trial-bd0-w0-s64/mixture/paio/paiod.toml --socket /tmp/paio-taillat-s0j5px_2/paiod.sock

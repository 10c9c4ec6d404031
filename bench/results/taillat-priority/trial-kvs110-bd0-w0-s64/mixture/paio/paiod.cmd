/work/main/target/release/paiod --config bench/results/taillat-priority/trial-kvs110-bd0-w0-s64/mixture/paio/paiod.toml --socket /tmp/paio-taillat-pwyd9e7z/paiod.sock

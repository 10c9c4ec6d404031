/work/main/target/release/paiod --config /tmp/trial-split256/mixture/paio/run2/paiod.toml --socket /tmp/paio-taillat-eibni7e9/paiod.sock

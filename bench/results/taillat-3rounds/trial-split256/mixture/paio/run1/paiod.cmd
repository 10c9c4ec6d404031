/work/main/target/release/paiod --config /tmp/trial-split256/mixture/paio/run1/paiod.toml --socket /tmp/paio-taillat-k_hionvz/paiod.sock

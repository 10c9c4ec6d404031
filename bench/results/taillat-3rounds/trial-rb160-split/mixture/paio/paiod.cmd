/work/main/target/release/paiod --config /tmp/trial-rb160-split/mixture/paio/paiod.toml --socket /tmp/paio-taillat-vnenfxrb/paiod.sock

/work/main/target/release/paiod --config /tmp/tl/diag150/mixture/paio/paiod.toml --socket /tmp/paio-taillat-_69znsvl/paiod.sock

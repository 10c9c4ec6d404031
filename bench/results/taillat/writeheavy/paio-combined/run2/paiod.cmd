/work/main/target/release/paiod --config /tmp/wh/paio-alg1/r2/writeheavy/paio/paiod.toml --socket /tmp/paio-taillat-l0i7t6r2/paiod.sock

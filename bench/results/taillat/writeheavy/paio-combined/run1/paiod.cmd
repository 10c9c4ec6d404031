/work/main/target/release/paiod --config /tmp/wh/paio-alg1/r1/writeheavy/paio/paiod.toml --socket /tmp/paio-taillat-ujv8d99q/paiod.sock

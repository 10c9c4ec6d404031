/work/main/target/release/paiod --config /tmp/wh/paio-alg1/r3/writeheavy/paio/paiod.toml --socket /tmp/paio-taillat-82qw_vjr/paiod.sock

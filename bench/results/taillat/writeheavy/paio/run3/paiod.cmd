/work/main/target/release/paiod --config /tmp/wh/paio-wo-r200/r3/writeheavy/paio/paiod.toml --socket /tmp/paio-taillat-wig7te4s/paiod.sock

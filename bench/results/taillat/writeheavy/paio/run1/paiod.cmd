/work/main/target/release/paiod --config /tmp/wh/paio-wo-r200/r1/writeheavy/paio/paiod.toml --socket /tmp/paio-taillat-17o9dy3c/paiod.sock

/work/main/target/release/paiod --config /tmp/wh/paio-wo-r200/r2/writeheavy/paio/paiod.toml --socket /tmp/paio-taillat-t_fx6_y7/paiod.sock

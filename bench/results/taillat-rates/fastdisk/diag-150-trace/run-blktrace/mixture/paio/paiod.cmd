/work/main/target/release/paiod --config /tmp/tl/trace150/mixture/paio/paiod.toml --socket /tmp/paio-taillat-u04cswm3/paiod.sock

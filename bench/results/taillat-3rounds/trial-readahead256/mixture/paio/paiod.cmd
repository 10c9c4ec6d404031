/work/main/target/release/paiod --config /tmp/trial-ra256/mixture/paio/paiod.toml --socket /tmp/paio-taillat-3gej1ex6/paiod.sock

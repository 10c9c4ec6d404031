/work/main/target/release/paiod --config /work/main/bench/results/taillat/writeheavy/paio/paiod.toml --socket /tmp/paio-taillat-axe_5xfk/paiod.sock

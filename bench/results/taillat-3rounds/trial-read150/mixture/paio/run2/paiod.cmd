/work/main/target/release/paiod --config /tmp/taillat-read150/mixture/paio/run2/paiod.toml --socket /tmp/paio-taillat-le8z6gh_/paiod.sock

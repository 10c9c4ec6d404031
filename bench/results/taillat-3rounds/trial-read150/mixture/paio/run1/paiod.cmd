/work/main/target/release/paiod --config /tmp/taillat-read150/mixture/paio/run1/paiod.toml --socket /tmp/paio-taillat-lh28utml/paiod.sock

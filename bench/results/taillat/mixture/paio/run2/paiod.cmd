/work/main/target/release/paiod --config /tmp/mr/paio-wo-r200/mixture-r2/mixture/paio/paiod.toml --socket /tmp/paio-taillat-f5dleti_/paiod.sock

/work/main/target/release/paiod --config /tmp/taillat-rh-trial/readheavy/paio/run2/paiod.toml --socket /tmp/paio-taillat-hwu91yuq/paiod.sock

/work/main/target/release/paiod --config /tmp/taillat-rh-trial/readheavy/paio/run1/paiod.toml --socket /tmp/paio-taillat-wohrfdmn/paiod.sock

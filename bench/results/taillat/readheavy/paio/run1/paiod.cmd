/work/main/target/release/paiod --config /tmp/mr/paio-wo-r200/readheavy-r1/readheavy/paio/paiod.toml --socket /tmp/paio-taillat-_6du3bg1/paiod.sock

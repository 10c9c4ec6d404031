/work/main/target/release/paiod --config /tmp/mr/paio-wo-r200/readheavy-r2/readheavy/paio/paiod.toml --socket /tmp/paio-taillat-cdmujn71/paiod.sock

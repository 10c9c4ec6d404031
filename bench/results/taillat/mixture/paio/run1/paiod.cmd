/work/main/target/release/paiod --config /tmp/mr/paio-wo-r200/mixture-r1/mixture/paio/paiod.toml --socket /tmp/paio-taillat-2ix_cpgx/paiod.sock

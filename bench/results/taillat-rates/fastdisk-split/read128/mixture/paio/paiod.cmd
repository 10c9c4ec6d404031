/work/main/target/release/paiod --config bench/results/taillat-rates/fastdisk-split/read128/mixture/paio/paiod.toml --socket /tmp/paio-taillat-ajpuk0dm/paiod.sock

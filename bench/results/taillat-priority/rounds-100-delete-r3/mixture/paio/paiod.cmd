/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-100-delete-r3/mixture/paio/paiod.toml --socket /tmp/paio-taillat-5a1hxk1q/paiod.sock

/work/main/target/release/paiod --config bench/results/taillat-3rounds/mixture-ra256/mixture/paio/run3/paiod.toml --socket /tmp/paio-taillat-jy96atzm/paiod.sock

/work/main/target/release/paiod --config bench/results/taillat-3rounds/readheavy/readheavy/paio/run3/paiod.toml --socket /tmp/paio-taillat-fmt8ue3d/paiod.sock

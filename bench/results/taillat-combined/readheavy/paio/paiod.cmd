/work/main/target/release/paiod --config /work/main/bench/results/taillat/readheavy/paio/paiod.toml --socket /tmp/paio-taillat-jgfrzd9i/paiod.sock

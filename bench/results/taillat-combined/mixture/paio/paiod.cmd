/work/main/target/release/paiod --config /work/main/bench/results/taillat/mixture/paio/paiod.toml --socket /tmp/paio-taillat-w5hytx5r/paiod.sock

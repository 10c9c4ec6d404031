/work/main/target/release/paiod --config bench/results/taillat-priority/trial-150-drl-paced/mixture/paio/paiod.toml --socket /tmp/paio-taillat-mbe1f0b7/paiod.sock

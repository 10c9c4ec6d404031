/work/main/target/release/paiod --config bench/results/taillat-priority/trial-150-readheavy-l0/read-busy1/readheavy/paio/paiod.toml --socket /tmp/paio-taillat-b3hcvn8l/paiod.sock

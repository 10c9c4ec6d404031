/work/main/target/release/paiod --config bench/results/taillat-priority/trial-150-readheavy-l0/no-write-priority/readheavy/paio/paiod.toml --socket /tmp/paio-taillat-gdv1avde/paiod.sock

/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-150-readheavy-nowp/readheavy/paio/run1/paiod.toml --socket /tmp/paio-taillat-c1z0yy52/paiod.sock

/work/main/target/release/paiod --config bench/results/taillat-priority/trial-150-wp/mixture/paio/paiod.toml --socket /tmp/paio-taillat-icvfmbl7/paiod.sock

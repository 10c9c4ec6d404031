/work/main/target/release/paiod --config bench/results/taillat-priority/trial-150-writeheavy-nostall/writeheavy/paio/paiod.toml --socket /tmp/paio-taillat-f_97bjn6/paiod.sock

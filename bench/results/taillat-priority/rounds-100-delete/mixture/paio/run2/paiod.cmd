/work/main/target/release/paiod --config bench/results/taillat-priority/rounds-100-delete/mixture/paio/run2/paiod.toml --socket /tmp/paio-taillat-8g_g4ya6/paiod.sock

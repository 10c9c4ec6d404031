/work/main/target/release/paiod --config bench/results/taillat-3rounds/trial-both-ra256/mixture/paio/run2/paiod.toml --socket /tmp/paio-taillat-b7bg9db4/paiod.sock

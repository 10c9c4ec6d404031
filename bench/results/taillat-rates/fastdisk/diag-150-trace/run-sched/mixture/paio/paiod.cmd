/work/main/target/release/paiod --config /tmp/tl/sched150/mixture/paio/paiod.toml --socket /tmp/paio-taillat-ikrrnwa8/paiod.sock

#!/usr/bin/env bash
# `make test-monitoring`: the Prometheus rules shipped in packaging/prometheus
# are valid (promtool check rules) and each alert fires on its series after
# its `for`, and only then (promtool test rules). That the rules and the
# Grafana dashboard name only metrics paiod exports is checked by
# crates/paio-control/tests/monitoring.rs. make setup installs promtool
# (Debian package prometheus).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../packaging/prometheus"
command -v promtool > /dev/null || { echo "test-monitoring: promtool is missing: run make setup" >&2; exit 1; }
promtool check rules paio-rules.yml
promtool test rules paio-rules.test.yml

#!/usr/bin/env bash
# Installs what `make demo`, `make test` and `make bench` need on a fresh
# Debian machine: the Debian packages below (when missing) and a check for the
# Rust toolchain. Crates are fetched by cargo itself.
set -euo pipefail

# Debian packages the build and tests use. Add to this list, never install by hand.
PACKAGES=(build-essential pkg-config fio python3 tar coreutils util-linux valgrind cmake librocksdb-dev rocksdb-tools libgtest-dev systemd systemd-container man-db file tmux fonts-dejavu-core etcd-server protobuf-compiler libcap2-bin)
# Installed without their recommendations: prometheus brings promtool, which
# checks paiod's metrics exposition (it recommends a node exporter service).
PACKAGES_ALONE=(prometheus)

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep "install ok installed" >/dev/null; }
missing=()
for p in "${PACKAGES[@]}"; do
  installed "$p" || missing+=("$p")
done
missing_alone=()
for p in "${PACKAGES_ALONE[@]}"; do
  installed "$p" || missing_alone+=("$p")
done

if [ $((${#missing[@]} + ${#missing_alone[@]})) -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]} ${missing_alone[*]}"
  if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo"
  else
    echo "setup: not root and no password-less sudo; install them with:" >&2
    echo "  sudo apt-get install -y ${missing[*]} ${missing_alone[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  [ ${#missing[@]} -eq 0 ] || $SUDO apt-get install -y -qq "${missing[@]}"
  [ ${#missing_alone[@]} -eq 0 ] || $SUDO apt-get install -y -qq --no-install-recommends "${missing_alone[@]}"
fi

# Python modules: pytest runs the experiment drivers' tests (their plots are
# drawn by `paio plot`).
for mod in pytest; do
  if ! python3 -c "import $mod" 2>/dev/null; then
    echo "setup: installing the Python module $mod"
    # pip first (a user or pyenv Python); Debian's own package for the
    # system Python, whose pip refuses to install (PEP 668).
    python3 -m pip install -q "$mod" 2>/dev/null \
      || { [ "$(id -u)" -eq 0 ] && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "python3-$mod"; } \
      || { echo "setup: cannot install $mod; run: python3 -m pip install $mod (or apt-get install python3-$mod)" >&2; exit 1; }
  fi
done

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo not found. Install Rust (https://rustup.rs), 1.88 or newer, then re-run." >&2
  exit 1
fi

#!/usr/bin/env bash
# Installs (or, with --uninstall, removes) paio from a release build:
#   bin/paio, bin/paiod
#   lib/libpaio_preload.so  (where `paio run` finds it: ../lib from bin/)
#   lib/libpaio.so.0 (SONAME), lib/libpaio.so -> libpaio.so.0, lib/libpaio.a,
#   include/paio.h, lib/pkgconfig/paio.pc (with this prefix)
#   share/man/man1/paio*.1, share/man/man8/paiod.8 (from `paio man`)
#   share/bash-completion/completions/{paio,paiod},
#   share/zsh/site-functions/{_paio,_paiod},
#   share/fish/vendor_completions.d/{paio,paiod}.fish (from `paio completions`)
#   share/paio/policies/ (the example stage policies; paiod/ the paiod ones)
#   share/paio/monitoring/ (Grafana dashboard, Prometheus rules)
#   lib/systemd/system/paiod.service, paiod.socket
#   lib/cmake/paio/ (find_package(paio): paio::paio, paio::paio_static)
#   the RocksDB plugin (built with cmake from integrations/rocksdb, installed
#   with cmake --install): lib/libpaio_rocksdb.so, libpaio_rocksdb_preload.so,
#   include/paio/rocksdb.h, lib/cmake/paio_rocksdb/, lib/pkgconfig/paio_rocksdb.pc
# under DESTDIR/PREFIX, and SYSCONFDIR/paio/paiod.toml (observe only) under
# DESTDIR unless a paiod.toml is there already. Uninstalling removes exactly
# these files (paiod.toml only if unchanged), then the directories of
# share/paio it leaves empty.
#
# Usage: scripts/install.sh [--uninstall] [--prefix DIR] [--destdir DIR]
#                           [--sysconfdir DIR] [--target-dir DIR]
# Defaults: prefix /usr/local, no destdir, sysconfdir /etc, target-dir
# CARGO_TARGET_DIR or target/. `make install` / `make uninstall` call it
# with PREFIX, DESTDIR and SYSCONFDIR.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
usage() {
    sed -n '2,27s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
    exit 2
}

action=install
prefix=/usr/local
sysconfdir=/etc
destdir=
target="${CARGO_TARGET_DIR:-$root/target}"
while [ $# -gt 0 ]; do
    case "$1" in
        --uninstall) action=uninstall; shift ;;
        --prefix) prefix="${2:?--prefix needs a value}"; shift 2 ;;
        --destdir) destdir="${2?--destdir needs a value}"; shift 2 ;;
        --sysconfdir) sysconfdir="${2:?--sysconfdir needs a value}"; shift 2 ;;
        --target-dir) target="${2:?--target-dir needs a value}"; shift 2 ;;
        -h|--help) usage ;;
        *) echo "install.sh: unknown argument: $1" >&2; usage ;;
    esac
done
case "$prefix" in
    /*) ;;
    *) echo "install.sh: --prefix must be an absolute path (it is written into paio.pc): $prefix" >&2; exit 2 ;;
esac
case "$target" in
    /*) ;;
    *) target="$root/$target" ;;
esac
release="$target/release"
top="$destdir$prefix"
bin="$top/bin" lib="$top/lib" inc="$top/include" share="$top/share"
policies="$share/paio/policies"
units="$lib/systemd/system"
config="$destdir$sysconfdir/paio/paiod.toml"

# Every installed file, as "SOURCE DEST MODE" (SOURCE - : generated).
manifest() {
    echo "$release/paio $bin/paio 755"
    echo "$release/paiod $bin/paiod 755"
    echo "$release/libpaio_preload.so $lib/libpaio_preload.so 755"
    echo "$release/libpaio.so $lib/libpaio.so.0 755"
    echo "- $lib/libpaio.so link"
    echo "$release/libpaio.a $lib/libpaio.a 644"
    echo "$root/crates/paio-ffi/include/paio.h $inc/paio.h 644"
    echo "- $lib/pkgconfig/paio.pc 644"
    for p in paio paio-run paio-status paio-ctl paio-top paio-doctor paio-plot paio-completions; do
        echo "- $share/man/man1/$p.1 644"
    done
    echo "- $share/man/man8/paiod.8 644"
    for p in paio paiod; do
        echo "- $share/bash-completion/completions/$p 644"
        echo "- $share/zsh/site-functions/_$p 644"
        echo "- $share/fish/vendor_completions.d/$p.fish 644"
    done
    for f in "$root"/policies/*.toml; do
        echo "$f $policies/$(basename "$f") 644"
    done
    for f in "$root"/policies/paiod/*.toml; do
        echo "$f $policies/paiod/$(basename "$f") 644"
    done
    echo "$root/packaging/grafana/paio-dashboard.json $share/paio/monitoring/paio-dashboard.json 644"
    echo "$root/packaging/prometheus/paio-rules.yml $share/paio/monitoring/paio-rules.yml 644"
    echo "$root/packaging/cmake/paioConfig.cmake $lib/cmake/paio/paioConfig.cmake 644"
    echo "- $lib/cmake/paio/paioConfigVersion.cmake 644"
    for f in lib/libpaio_rocksdb.so lib/libpaio_rocksdb_preload.so include/paio/rocksdb.h \
        lib/cmake/paio_rocksdb/paio_rocksdbConfig.cmake \
        lib/cmake/paio_rocksdb/paio_rocksdbConfigVersion.cmake \
        lib/cmake/paio_rocksdb/paio_rocksdbTargets.cmake \
        lib/cmake/paio_rocksdb/paio_rocksdbTargets-release.cmake \
        lib/pkgconfig/paio_rocksdb.pc; do
        echo "cmake $top/$f cmake"
    done
    echo "- $units/paiod.service 644"
    echo "$root/packaging/systemd/paiod.socket $units/paiod.socket 644"
}

if [ "$action" = uninstall ]; then
    removed=0
    while read -r _ dest _; do
        if [ -e "$dest" ] || [ -L "$dest" ]; then
            rm -f "$dest"
            removed=$((removed + 1))
        fi
    done < <(manifest)
    rmdir "$policies/paiod" "$policies" "$share/paio/monitoring" "$share/paio" \
        "$lib/cmake/paio" "$lib/cmake/paio_rocksdb" "$inc/paio" 2>/dev/null || true
    if [ -f "$config" ]; then
        if cmp -s "$config" "$root/packaging/paiod.toml"; then
            rm -f "$config"
            rmdir "$(dirname "$config")" 2>/dev/null || true
            removed=$((removed + 1))
        else
            echo "install.sh: kept $config (changed since it was installed)"
        fi
    fi
    echo "install.sh: removed $removed files from $top"
    exit 0
fi

for f in paio paiod libpaio_preload.so libpaio.so libpaio.a; do
    [ -f "$release/$f" ] || {
        echo "install.sh: $release/$f is missing: build first (make install does: cargo build --release -p paio-cli -p paio-control -p paio-preload -p paio-ffi)" >&2
        exit 1
    }
done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$release/paio" man "$work/man"
for p in paio paiod; do
    "$release/paio" completions bash "$p" > "$work/$p.bash"
    "$release/paio" completions zsh "$p" > "$work/_$p"
    "$release/paio" completions fish "$p" > "$work/$p.fish"
done
bash "$root/crates/paio-ffi/gen-pc.sh" --prefix "$prefix" -o "$work/paio.pc"
version="$(awk -F'"' '/^\[workspace.package\]/ {w = 1} w && /^version/ {print $2; exit}' "$root/Cargo.toml")"
sed -e "s|@version@|$version|g" "$root/packaging/cmake/paioConfigVersion.cmake.in" \
    > "$work/paioConfigVersion.cmake"
sed -e "s|@bindir@|$prefix/bin|g" -e "s|@sysconfdir@|$sysconfdir|g" \
    "$root/packaging/systemd/paiod.service.in" > "$work/paiod.service"

n=0
while read -r src dest mode; do
    [ "$mode" = cmake ] && continue # installed by cmake --install below
    mkdir -p "$(dirname "$dest")"
    if [ "$mode" = link ]; then
        ln -sfn libpaio.so.0 "$dest"
    else
        if [ "$src" = - ]; then
            case "$dest" in
                */man/man*/*) src="$work/man/$(basename "$dest")" ;;
                */bash-completion/*) src="$work/$(basename "$dest").bash" ;;
                */site-functions/*) src="$work/$(basename "$dest")" ;;
                */vendor_completions.d/*) src="$work/$(basename "$dest")" ;;
                */paio.pc) src="$work/paio.pc" ;;
                */paiod.service) src="$work/paiod.service" ;;
                */paioConfigVersion.cmake) src="$work/paioConfigVersion.cmake" ;;
            esac
        fi
        install -m "$mode" "$src" "$dest"
    fi
    n=$((n + 1))
done < <(manifest)
# The RocksDB plugin, built against this libpaio and installed by CMake.
plugin="$target/rocksdb-install"
# A fresh cache: GNUInstallDirs would otherwise replace CMAKE_INSTALL_LIBDIR
# by the multiarch directory when the prefix changes to /usr.
rm -f "$plugin/CMakeCache.txt"
cmake -S "$root/integrations/rocksdb" -B "$plugin" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR=lib -DCMAKE_INSTALL_INCLUDEDIR=include \
    -DPAIO_LIB_DIR="$release" -DPAIO_INCLUDE_DIR="$root/crates/paio-ffi/include" \
    -DPAIO_ROCKSDB_TESTS=OFF -DPAIO_ROCKSDB_EXAMPLE=OFF > "$work/cmake.log" 2>&1 \
    || { cat "$work/cmake.log" >&2; echo "install.sh: configuring the RocksDB plugin failed (make setup installs librocksdb-dev)" >&2; exit 1; }
cmake --build "$plugin" -j "${JOBS:-2}" > "$work/build.log" 2>&1 \
    || { cat "$work/build.log" >&2; echo "install.sh: building the RocksDB plugin failed" >&2; exit 1; }
DESTDIR="$destdir" cmake --install "$plugin" > "$work/install.log" 2>&1 \
    || { cat "$work/install.log" >&2; echo "install.sh: installing the RocksDB plugin failed" >&2; exit 1; }
while read -r _ dest mode; do
    [ "$mode" = cmake ] || continue
    [ -e "$dest" ] || { echo "install.sh: cmake --install did not install $dest" >&2; exit 1; }
    n=$((n + 1))
done < <(manifest)
if [ "$(grep -c "" "$plugin/install_manifest.txt")" -ne "$(manifest | grep -c ' cmake$')" ]; then
    echo "install.sh: cmake --install installed other files than listed here:" >&2
    cat "$plugin/install_manifest.txt" >&2
    exit 1
fi

if [ -e "$config" ]; then
    echo "install.sh: kept the existing $config"
else
    install -D -m 644 "$root/packaging/paiod.toml" "$config"
    n=$((n + 1))
fi
echo "install.sh: installed $n files under $top (configuration: $config)"

#!/usr/bin/env bash
# `make test-install`: installs paio the two ways packagers and users do,
# and uses only the installed tree:
#   1. `make install PREFIX=<tmp>/prefix`: the C example builds with the
#      installed paio.pc (pkg-config) and runs, linked to libpaio.so.0 by
#      its SONAME; an outside CMake project finds paio (shared and static)
#      and paio_rocksdb, and builds and runs the C example and the RocksDB
#      example with them; the RocksDB example also builds with pkg-config's
#      paio_rocksdb flags alone; the installed `paio run` finds the installed interposer
#      without PAIO_LIB and enforces a limit from an installed example
#      policy; the manual pages render; the completions parse; `make
#      uninstall` leaves no file behind; the systemd units pass
#      `systemd-analyze verify`; the default paiod.toml is valid, kept by
#      a second install and removed only while unchanged.
#   2. `make install DESTDIR=<tmp>/stage PREFIX=/usr`: every file lands
#      under the staging directory and paio.pc names /usr, not the staging
#      directory.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test-install: FAILED: $*" >&2; exit 1; }
cd "$root"

echo "== make install PREFIX=$tmp/prefix"
p="$tmp/prefix"
make -s install PREFIX="$p" SYSCONFDIR="$p/etc" >/dev/null
for f in bin/paio bin/paiod lib/libpaio_preload.so lib/libpaio.so.0 lib/libpaio.a include/paio.h \
    lib/pkgconfig/paio.pc share/man/man1/paio-run.1 share/man/man8/paiod.8 \
    share/bash-completion/completions/paio share/paio/policies/demo.toml \
    share/paio/policies/paiod/max_min.toml share/paio/monitoring/paio-rules.yml \
    share/paio/monitoring/paio-dashboard.json; do
    [ -e "$p/$f" ] || fail "$f was not installed"
done
[ "$(readlink "$p/lib/libpaio.so")" = libpaio.so.0 ] || fail "lib/libpaio.so is not a link to libpaio.so.0"

echo "== the C example against the installed tree"
cp crates/paio-ffi/examples/c/example.c "$tmp/example.c"
flags="$(PKG_CONFIG_PATH="$p/lib/pkgconfig" pkg-config --cflags --libs paio)"
case "$flags" in *"$root"*) fail "paio.pc points into the source tree: $flags" ;; esac
# shellcheck disable=SC2086
cc -std=c99 -Wall -Werror "$tmp/example.c" $flags -o "$tmp/example"
needed="$(readelf -d "$tmp/example" | awk '/NEEDED/ && /paio/ {print $NF}')"
[ "$needed" = "[libpaio.so.0]" ] || fail "the example needs $needed, not [libpaio.so.0]"
LD_LIBRARY_PATH="$p/lib" "$tmp/example" > "$tmp/example.out" || fail "the installed example failed"

echo "== CMake: find_package(paio) and find_package(paio_rocksdb) from an outside project"
mkdir -p "$tmp/outside"
cp crates/paio-ffi/examples/c/example.c integrations/rocksdb/examples/app.cc "$tmp/outside/"
cat > "$tmp/outside/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.16)
project(outside C CXX)
set(CMAKE_CXX_STANDARD 17)
find_package(paio 0.1 REQUIRED)
find_package(paio_rocksdb 0.1 REQUIRED)
add_executable(c_example example.c)
target_link_libraries(c_example PRIVATE paio::paio)
add_executable(c_example_static example.c)
target_link_libraries(c_example_static PRIVATE paio::paio_static)
add_executable(rocksdb_app app.cc)
target_link_libraries(rocksdb_app PRIVATE paio_rocksdb::paio_rocksdb)
CMAKE
cmake -S "$tmp/outside" -B "$tmp/outside/build" -DCMAKE_PREFIX_PATH="$p" > "$tmp/cmake.log" 2>&1 \
    || { cat "$tmp/cmake.log" >&2; fail "configuring a project that finds paio and paio_rocksdb"; }
cmake --build "$tmp/outside/build" -j 2 > "$tmp/build.log" 2>&1 \
    || { cat "$tmp/build.log" >&2; fail "building against the installed CMake packages"; }
LD_LIBRARY_PATH="$p/lib" "$tmp/outside/build/c_example" > /dev/null || fail "c_example (paio::paio)"
"$tmp/outside/build/c_example_static" > /dev/null || fail "c_example_static (paio::paio_static)"
LD_LIBRARY_PATH="$p/lib" "$tmp/outside/build/rocksdb_app" "$tmp/app-db" > "$tmp/app.out" \
    || fail "the RocksDB example against the installed plugin"
grep -q '"name":"flush","ops":[1-9]' "$tmp/app.out" || fail "the RocksDB example's stage saw no flush: $(cat "$tmp/app.out")"

echo "== pkg-config: the RocksDB example with -lpaio_rocksdb's flags only"
flags="$(PKG_CONFIG_PATH="$p/lib/pkgconfig" pkg-config --cflags --libs paio_rocksdb)"
# shellcheck disable=SC2086
c++ -std=c++17 "$tmp/outside/app.cc" $flags -o "$tmp/app-pc" || fail "c++ app.cc \$(pkg-config --cflags --libs paio_rocksdb)"
rm -rf "$tmp/app-db"
LD_LIBRARY_PATH="$p/lib" "$tmp/app-pc" "$tmp/app-db" > /dev/null || fail "the pkg-config-built RocksDB example"

echo "== the installed paio run, without PAIO_LIB"
head -c 4194304 /dev/zero > "$tmp/in"
env -u PAIO_LIB "$p/bin/paio" run --summary --limit read=8MiB/s -- \
    dd if="$tmp/in" of=/dev/null bs=64k 2> "$tmp/run.err" || { cat "$tmp/run.err" >&2; fail "paio run"; }
grep -q "read" "$tmp/run.err" || { cat "$tmp/run.err" >&2; fail "no summary from paio run"; }
env -u PAIO_LIB "$p/bin/paio" run --policy "$p/share/paio/policies/demo.toml" -- true \
    || fail "paio run with an installed example policy"
"$p/bin/paiod" --check-config "$p/share/paio/policies/paiod/max_min.toml" > /dev/null \
    || fail "paiod --check-config on an installed example"

echo "== manual pages and completions"
for page in "$p"/share/man/man1/*.1 "$p"/share/man/man8/paiod.8; do
    out="$(MANWIDTH=80 man -l "$page" 2>&1)" || fail "man -l $page"
    [ -n "$out" ] || fail "$page renders empty"
done
MANPATH="$p/share/man" man -w paiod > /dev/null || fail "man does not find paiod in the installed MANPATH"
for c in paio paiod; do
    bash -n "$p/share/bash-completion/completions/$c" || fail "bash completion of $c"
    head -1 "$p/share/zsh/site-functions/_$c" | grep -q "^#compdef $c" || fail "zsh completion of $c"
    grep -q "complete -c $c" "$p/share/fish/vendor_completions.d/$c.fish" || fail "fish completion of $c"
done

echo "== systemd units and the default configuration"
"$p/bin/paiod" --check-config "$p/etc/paio/paiod.toml" > /dev/null || fail "the installed paiod.toml"
grep -q "^ExecStart=$p/bin/paiod --config $p/etc/paio/paiod.toml$" "$p/lib/systemd/system/paiod.service" \
    || fail "paiod.service does not name the installed paiod and configuration"
SYSTEMD_LOG_LEVEL=notice systemd-analyze verify --man=no \
    "$p/lib/systemd/system/paiod.socket" "$p/lib/systemd/system/paiod.service" 2> "$tmp/verify.err" \
    || { cat "$tmp/verify.err" >&2; fail "systemd-analyze verify"; }
[ ! -s "$tmp/verify.err" ] || { cat "$tmp/verify.err" >&2; fail "systemd-analyze verify warned"; }
echo "# edited" >> "$p/etc/paio/paiod.toml"
make -s install PREFIX="$p" SYSCONFDIR="$p/etc" > "$tmp/again.out"
grep -q "kept the existing" "$tmp/again.out" || fail "a second install replaced an edited paiod.toml"

echo "== make uninstall PREFIX=$tmp/prefix"
make -s uninstall PREFIX="$p" SYSCONFDIR="$p/etc" > "$tmp/uninstall.out"
grep -q "kept $p/etc/paio/paiod.toml" "$tmp/uninstall.out" || fail "uninstall removed an edited paiod.toml"
rm "$p/etc/paio/paiod.toml"
left="$(find "$p" -type f -o -type l)"
[ -z "$left" ] || fail "uninstall left: $left"

echo "== make install DESTDIR=$tmp/stage PREFIX=/usr"
make -s install DESTDIR="$tmp/stage" PREFIX=/usr >/dev/null
[ -f "$tmp/stage/etc/paio/paiod.toml" ] || fail "the configuration was not staged under DESTDIR"
grep -q "^ExecStart=/usr/bin/paiod " "$tmp/stage/usr/lib/systemd/system/paiod.service" \
    || fail "paiod.service names the staging directory"
[ -x "$tmp/stage/usr/bin/paio" ] || fail "DESTDIR was not honoured"
grep -q "^prefix=/usr$" "$tmp/stage/usr/lib/pkgconfig/paio.pc" || fail "paio.pc does not name /usr"
grep -q "$tmp" "$tmp/stage/usr/lib/pkgconfig/paio.pc" && fail "paio.pc names the staging directory"
make -s uninstall DESTDIR="$tmp/stage" PREFIX=/usr >/dev/null
left="$(find "$tmp/stage" -type f -o -type l)"
[ -z "$left" ] || fail "uninstall left: $left"
echo "test-install: ok"

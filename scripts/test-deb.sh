#!/usr/bin/env bash
# `make test-deb`: builds the Debian package (scripts/make-deb.sh), checks
# its metadata and contents, installs it with dpkg into a temporary root
# (dpkg --root; the machine's own packages are not touched), uses the
# installed paio and paiod there, removes it (the edited conffile stays),
# purges it, and checks that nothing is left.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test-deb: FAILED: $*" >&2; exit 1; }
cd "$root"

deb="$(bash scripts/make-deb.sh -o "$tmp/paio.deb")"
echo "== $deb"
info="$(dpkg-deb --info "$deb")"
for field in "Package: paio" "Depends: libc6 (>= " "librocksdb" "Recommends: fonts-dejavu-core" "Architecture: $(dpkg --print-architecture)"; do
    grep -qF "$field" <<<"$info" || fail "control lacks \"$field\""
done
contents="$(dpkg-deb --contents "$deb")"
for f in ./usr/bin/paio ./usr/bin/paiod ./usr/lib/libpaio_preload.so ./usr/lib/libpaio.so.0 \
    ./usr/include/paio.h ./usr/lib/pkgconfig/paio.pc ./usr/share/man/man8/paiod.8 \
    ./usr/lib/systemd/system/paiod.service ./etc/paio/paiod.toml ./usr/lib/libpaio_rocksdb.so \
    ./usr/lib/cmake/paio/paioConfig.cmake ./usr/lib/cmake/paio_rocksdb/paio_rocksdbConfig.cmake; do
    grep -q " $f\( \|$\)" <<<"$contents" || fail "the package lacks $f"
done
grep -q "root/root" <<<"$contents" || fail "files are not owned by root"
[ "$(dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles)" = /etc/paio/paiod.toml ] || fail "conffiles"

echo "== dpkg --root: install"
r="$tmp/root"
mkdir -p "$r/var/lib/dpkg/info" "$r/var/lib/dpkg/updates"
touch "$r/var/lib/dpkg/status"
opts=(--root="$r" --log=/dev/null --force-depends --force-script-chrootless)
[ "$(id -u)" -eq 0 ] || opts+=(--force-not-root)
dpkg "${opts[@]}" -i "$deb" > "$tmp/dpkg.out" 2>&1 || { cat "$tmp/dpkg.out" >&2; fail "dpkg -i"; }
dpkg-query --root="$r" -W -f='${Status}' paio | grep "install ok installed" >/dev/null || fail "not installed"
env -u PAIO_LIB "$r/usr/bin/paio" run --summary -- true 2> "$tmp/run.err" \
    || { cat "$tmp/run.err" >&2; fail "the installed paio run"; }
"$r/usr/bin/paiod" --check-config "$r/etc/paio/paiod.toml" > /dev/null || fail "the installed paiod.toml"

echo "== dpkg --root: remove, then purge"
echo "# edited" >> "$r/etc/paio/paiod.toml"
dpkg "${opts[@]}" -r paio > "$tmp/dpkg.out" 2>&1 || { cat "$tmp/dpkg.out" >&2; fail "dpkg -r"; }
[ ! -e "$r/usr/bin/paio" ] || fail "dpkg -r left /usr/bin/paio"
[ -f "$r/etc/paio/paiod.toml" ] || fail "dpkg -r removed the edited conffile"
dpkg "${opts[@]}" --purge paio > "$tmp/dpkg.out" 2>&1 || { cat "$tmp/dpkg.out" >&2; fail "dpkg --purge"; }
left="$(find "$r" \( -type f -o -type l \) -not -path "$r/var/lib/dpkg/*")"
[ -z "$left" ] || fail "purge left: $left"
echo "test-deb: ok"

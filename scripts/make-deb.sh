#!/usr/bin/env bash
# `make deb`: builds target/debian/paio_VERSION_ARCH.deb from the release
# build, with the files `make install PREFIX=/usr SYSCONFDIR=/etc` puts in
# place (scripts/install.sh): /etc/paio/paiod.toml is a conffile, libpaio's
# SONAME registers with ldconfig through a trigger, and the maintainer
# scripts tell a running systemd about the units (and do nothing else: the
# socket is enabled by the administrator, docs/operations.md). Depends on
# the glibc version the binaries need (read from their symbol versions) and
# on the packages holding the other libraries they need (RocksDB for the
# plugin, libstdc++, libgcc).
#
# Usage: scripts/make-deb.sh [--target-dir DIR] [-o FILE]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
out=
while [ $# -gt 0 ]; do
    case "$1" in
        --target-dir) target="${2:?--target-dir needs a value}"; shift 2 ;;
        -o) out="${2:?-o needs a value}"; shift 2 ;;
        -h|--help) sed -n '2,10s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit 2 ;;
        *) echo "make-deb.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
done
case "$target" in /*) ;; *) target="$root/$target" ;; esac

version="$(awk -F'"' '/^\[workspace.package\]/ {w = 1} w && /^version/ {print $2; exit}' "$root/Cargo.toml")"
arch="$(dpkg --print-architecture)"
out="${out:-$target/debian/paio_${version}_${arch}.deb}"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT

bash "$root/scripts/install.sh" --prefix /usr --sysconfdir /etc --destdir "$stage" \
    --target-dir "$target" > /dev/null
# Debug information stays in the build tree (the release profile keeps
# line tables): the package's files are stripped of it, as Debian's are.
find "$stage" -type f \( -perm -u+x -o -name '*.so*' -o -name '*.a' \) -print0 \
    | while IFS= read -r -d '' f; do
        # grep reads all its input (no -q): a reader that stops early kills
        # the writer with SIGPIPE, which pipefail turns into a failure.
        if file -b "$f" | grep -e ELF -e 'current ar archive' >/dev/null; then strip --strip-debug "$f"; fi
    done
release="$target/release"
glibc="$(objdump -T "$release/paio" "$release/paiod" "$release/libpaio_preload.so" "$release/libpaio.so" \
    | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1)"
[ -n "$glibc" ] || { echo "make-deb.sh: cannot read the glibc version the binaries need" >&2; exit 1; }
# The packages of the other libraries the installed files need (libstdc++,
# RocksDB for the plugin, ...), found with ldconfig and dpkg.
others=()
while read -r soname; do
    case "$soname" in libpaio*|libc.so.6|ld-linux*) continue ;; esac
    # awk reads to the end (no exit): see the SIGPIPE note above.
    path="$(ldconfig -p | awk -v n="$soname" '$1 == n && !p {print $NF; p = 1}')"
    [ -n "$path" ] || { echo "make-deb.sh: $soname (needed by the package) is not installed here" >&2; exit 1; }
    # dpkg knows a file under the path it installed it at (/lib or /usr/lib).
    pkg=
    for candidate in "$path" "$(readlink -f "$path")"; do
        [ -n "$pkg" ] || pkg="$( (dpkg-query -S "$candidate" 2>/dev/null || true) | sed -n '1s/:.*//p')"
    done
    [ -n "$pkg" ] || { echo "make-deb.sh: no package holds $path" >&2; exit 1; }
    # libc6 is already there, with its version (libm, libpthread, ...).
    [ "$pkg" = libc6 ] || others+=("$pkg")
done < <(find "$stage" -type f \( -perm -u+x -o -name '*.so*' \) -exec readelf -d {} \; 2>/dev/null \
    | awk '/NEEDED/ {gsub(/[\[\]]/, "", $NF); print $NF}' | sort -u)
depends="libc6 (>= $glibc)"
for pkg in $(printf '%s\n' "${others[@]}" | sort -u); do
    depends="$depends, $pkg"
done

mkdir -p "$stage/DEBIAN"
cat > "$stage/DEBIAN/control" <<CONTROL
Package: paio
Version: $version
Architecture: $arch
Maintainer: paio developers <paio@example.invalid>
Section: admin
Priority: optional
Depends: $depends
Recommends: fonts-dejavu-core
Installed-Size: $(du -sk --exclude=DEBIAN "$stage" | cut -f1)
Homepage: https://example.invalid/paio
Description: user-level software-defined storage data planes
 paio enforces storage policies (rate limits, fair shares, priorities for
 latency-critical I/O) on unmodified programs: paio run loads an
 LD_PRELOAD interposer, paiod is the control plane that coordinates the
 stages of a machine, libpaio is the C API.
CONTROL
echo /etc/paio/paiod.toml > "$stage/DEBIAN/conffiles"
echo "activate-noawait ldconfig" > "$stage/DEBIAN/triggers"
for script in postinst postrm; do
    cat > "$stage/DEBIAN/$script" <<'SCRIPT'
#!/bin/sh
set -e
# A running systemd learns about the units; nothing is started or enabled.
# Installs into another root (DPKG_ROOT) leave the host alone.
if [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
fi
SCRIPT
    chmod 755 "$stage/DEBIAN/$script"
done
mkdir -p "$(dirname "$out")"
dpkg-deb --root-owner-group -Zxz --build "$stage" "$out" > /dev/null
echo "$out"

#!/usr/bin/env bash
# Writes paio.pc (pkg-config metadata for libpaio) from paio.pc.in.
#
# Usage: gen-pc.sh [--prefix DIR] [--libdir DIR] [--includedir DIR]
#                  [--version VERSION] -o OUT
#
# Defaults: prefix /usr/local, libdir PREFIX/lib, includedir PREFIX/include,
# version the workspace's (root Cargo.toml, [workspace.package]).
# Example, for an uninstalled build:
#   gen-pc.sh --libdir target/release --includedir crates/paio-ffi/include -o build/paio.pc
#   PKG_CONFIG_PATH=build pkg-config --cflags --libs paio
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

usage() {
    sed -n '2,11s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
    exit 2
}

absolute() {
    case "$1" in
        /*) printf '%s\n' "$1" ;;
        *) printf '%s/%s\n' "$PWD" "$1" ;;
    esac
}

prefix=/usr/local
libdir=
includedir=
version=
out=
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) prefix="${2:?--prefix needs a value}"; shift 2 ;;
        --libdir) libdir="${2:?--libdir needs a value}"; shift 2 ;;
        --includedir) includedir="${2:?--includedir needs a value}"; shift 2 ;;
        --version) version="${2:?--version needs a value}"; shift 2 ;;
        -o) out="${2:?-o needs a value}"; shift 2 ;;
        -h|--help) usage ;;
        *) echo "gen-pc.sh: unknown argument: $1" >&2; usage ;;
    esac
done
[ -n "$out" ] || usage

prefix="$(absolute "$prefix")"
libdir="$(absolute "${libdir:-$prefix/lib}")"
includedir="$(absolute "${includedir:-$prefix/include}")"
if [ -z "$version" ]; then
    version="$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\([^"]*\)".*/\1/p' "$root/Cargo.toml")"
fi
[ -n "$version" ] || { echo "gen-pc.sh: cannot read the version from $root/Cargo.toml" >&2; exit 1; }

for value in "$prefix" "$libdir" "$includedir" "$version"; do
    case "$value" in
        *[[:space:]\|\&\\]*) echo "gen-pc.sh: unsupported character in: $value" >&2; exit 1 ;;
    esac
done

mkdir -p "$(dirname "$out")"
sed -e "s|@prefix@|$prefix|g" \
    -e "s|@libdir@|$libdir|g" \
    -e "s|@includedir@|$includedir|g" \
    -e "s|@version@|$version|g" \
    "$here/paio.pc.in" >"$out.tmp"
mv "$out.tmp" "$out"

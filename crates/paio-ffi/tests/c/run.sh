#!/usr/bin/env bash
# Builds libpaio (release) and tests its C API from C:
#   - tests/c/test_paio.c, linked once to libpaio.so (through pkg-config and a
#     paio.pc generated for the build tree) and once statically to libpaio.a;
#   - examples/c/example.c, checked to be the program shown in docs/c-api.md,
#     compiled and run, so neither can rot;
#   - include/paio.h alone, as C99 and as C++;
#   - test_paio.c again under ASan + UBSan (leaks checked).
# Everything is built in tests/c/build/. Uses CARGO_TARGET_DIR if set, else
# the workspace's target/. Called by `make test-c`.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
crate="$(cd "$here/../.." && pwd)"
root="$(cd "$crate/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in
    /*) ;;
    *) target="$root/$target" ;; # cargo is run from the root below
esac
libdir="$target/release"
build="$here/build"
cc="${CC:-cc}"
cxx="${CXX:-c++}"
cflags=(-std=c99 -Wall -Wextra -Werror -pedantic -O2 -g)

cd "$root"
# The packages `make` builds together (its RELEASE_PKGS): built alone,
# paio-ffi would give its dependencies other features and build them again.
cargo build --release -p paio-cli -p paio-preload -p paio-control -p paio-ffi
for lib in libpaio.so libpaio.a; do
    [ -f "$libdir/$lib" ] || { echo "run.sh: $libdir/$lib was not built" >&2; exit 1; }
done

mkdir -p "$build"
bash "$crate/gen-pc.sh" --prefix "$build" --libdir "$libdir" \
    --includedir "$crate/include" -o "$build/paio.pc"
export PKG_CONFIG_PATH="$build${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
pc_output="$(pkg-config --cflags --libs paio)"
read -r -a pc_flags <<<"$pc_output"

echo "== compiling the header alone as C99 and as C++"
"$cc" "${cflags[@]}" -x c -fsyntax-only "$crate/include/paio.h"
"$cxx" -x c++ -std=c++11 -Wall -Wextra -Werror -pedantic -fsyntax-only "$crate/include/paio.h"

echo "== compiling test_paio.c against libpaio.so (pkg-config) and libpaio.a"
"$cc" "${cflags[@]}" -pthread "$here/test_paio.c" "${pc_flags[@]}" \
    -Wl,-rpath,"$libdir" -o "$build/test_paio_shared"
"$cc" "${cflags[@]}" -pthread -I"$crate/include" "$here/test_paio.c" \
    "$libdir/libpaio.a" -lpthread -ldl -lm -o "$build/test_paio_static"

echo "== checking that docs/c-api.md shows examples/c/example.c verbatim"
awk '/^<!-- example: crates\/paio-ffi\/examples\/c\/example.c -->$/ { marked = 1; next }
     marked && !inside && /^```c$/ { inside = 1; next }
     inside && /^```$/ { exit }
     inside { print }' "$root/docs/c-api.md" >"$build/example-from-doc.c"
diff -u "$crate/examples/c/example.c" "$build/example-from-doc.c" ||
    { echo "run.sh: docs/c-api.md and examples/c/example.c differ; copy the file into the doc" >&2; exit 1; }

echo "== compiling examples/c/example.c (pkg-config)"
"$cc" "${cflags[@]}" "$crate/examples/c/example.c" "${pc_flags[@]}" \
    -Wl,-rpath,"$libdir" -o "$build/example"

echo "== running the example"
"$build/example" >"$build/example.out"
# The 256 flush writes went through the rate limiter.
grep -q '"name":"limit","kind":"drl","ops":256,' "$build/example.out" ||
    { echo "run.sh: unexpected example output:" >&2; cat "$build/example.out" >&2; exit 1; }

echo "== test_paio (libpaio.so)"
"$build/test_paio_shared"
echo "== test_paio (libpaio.a)"
"$build/test_paio_static"

# The same tests under AddressSanitizer and UndefinedBehaviorSanitizer: the
# C side instrumented, every allocation (Rust's too) tracked by ASan's
# allocator, leaks checked at exit, any report fatal.
# A set-user-ID program linked with libpaio runs with the invoking user's
# environment: PAIO_BOARD must not make it create files with its own rights
# (here, root's, in a directory only root may write). Run as root, the
# same program creates the board there, so the check can fail.
echo "== a set-user-ID program ignores the caller's PAIO_BOARD (libpaio.a)"
[ "$(id -u)" = 0 ] ||
    { echo "run.sh: this check makes a set-user-ID root program and runs it as nobody: run it as root" >&2; exit 1; }
command -v setpriv >/dev/null ||
    { echo "run.sh: setpriv (util-linux) is needed to run a program as nobody" >&2; exit 1; }
secure="$(mktemp -d /tmp/paio-secure.XXXXXX)"
trap 'rm -rf "$secure"' EXIT
chmod 755 "$secure"
mkdir -m 755 "$secure/root-only"
"$cc" "${cflags[@]}" -pthread -I"$crate/include" "$here/secure.c" \
    "$libdir/libpaio.a" -lpthread -ldl -lm -o "$secure/secure"
chmod 4755 "$secure/secure"
PAIO_BOARD="$secure/root-only/board" "$secure/secure" >/dev/null
[ -f "$secure/root-only/board" ] ||
    { echo "run.sh: run by root, secure.c did not create its PAIO_BOARD" >&2; exit 1; }
rm "$secure/root-only/board"
setpriv --reuid=65534 --regid=65534 --clear-groups \
    env PAIO_BOARD="$secure/root-only/board" "$secure/secure" >"$secure/out" 2>"$secure/err" ||
    { echo "run.sh: the set-user-ID program failed:" >&2; cat "$secure/err" >&2; exit 1; }
grep -qx "stage created" "$secure/out"
if [ -n "$(ls -A "$secure/root-only")" ]; then
    echo "run.sh: a set-user-ID program created the caller's PAIO_BOARD as root:" >&2
    ls -l "$secure/root-only" >&2
    exit 1
fi
grep -q "PAIO_BOARD is ignored and no board is used" "$secure/err" ||
    { echo "run.sh: the set-user-ID program did not say it ignores PAIO_BOARD:" >&2; cat "$secure/err" >&2; exit 1; }

echo "== limits shared by processes (PAIO_SHARED)"
"$cc" "${cflags[@]}" "$here/shared.c" "${pc_flags[@]}" -Wl,-rpath,"$libdir" -o "$build/shared"
env -u PAIO_SHARED "$build/shared" refused
rm -f "$build/shared-limits"
# Two processes of 50 requests each at once, 100 ops/s in all: about 1 s
# each (0.5 s if each process had a bucket of its own).
PAIO_SHARED="$build/shared-limits" "$build/shared" shared 50 >"$build/shared.1" &
first=$!
PAIO_SHARED="$build/shared-limits" "$build/shared" shared 50 >"$build/shared.2"
wait "$first"
cat "$build/shared.1" "$build/shared.2" | sort -n | awk 'NR == 1 { low = $1 } END { exit !(low >= 0.7 && $1 >= 0.9) }' ||
    { echo "run.sh: two processes did not share the bucket's 100 ops/s (seconds each):" >&2
      cat "$build/shared.1" "$build/shared.2" >&2; exit 1; }

echo "== test_paio under ASan + UBSan (libpaio.a)"
"$cc" "${cflags[@]}" -O1 -fno-omit-frame-pointer -fsanitize=address,undefined \
    -fno-sanitize-recover=all -pthread -I"$crate/include" "$here/test_paio.c" \
    "$libdir/libpaio.a" -lpthread -ldl -lm -o "$build/test_paio_asan"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:halt_on_error=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$build/test_paio_asan"

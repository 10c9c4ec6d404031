#!/usr/bin/env bash
# `make test-operations-doc`: runs every command of docs/operations.md's
# ```sh blocks as it is written there, and checks what each does.
#
# The commands install into /usr/local, /opt and /etc, enable paiod's
# systemd units, start paiod through its socket and signal it: they run in
# a throwaway copy of this machine, a container booted with systemd as
# PID 1 (systemd-nspawn --boot) whose root is an overlay of this machine's
# root, so that systemctl works as on a real host and everything written
# is gone afterwards. Needs root and systemd-nspawn (make setup installs
# systemd-container). A command the test does not know fails it: a new line
# in the docs needs its expectation here.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fail() { echo "test-operations-doc: FAILED: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || fail "needs root (it boots a container)"

case "${1:-}" in
--boot)
    # In a private mount namespace: the overlay root, then the container.
    work="$2"
    mount --make-rprivate /
    mkdir -p "$work/upper" "$work/work" "$work/root"
    mount -t overlay overlay -o "lowerdir=/,upperdir=$work/upper,workdir=$work/work" "$work/root"
    # The checkout itself is bound in at its own path: the container's
    # /tmp is its own tmpfs, where a checkout under /tmp would not be.
    exec systemd-nspawn -D "$work/root" --bind="$root" --boot --quiet --register=no --keep-unit \
        --console=passive
    ;;
--inside)
    ;;
*)
    command -v systemd-nspawn >/dev/null || fail "systemd-nspawn is missing (make setup installs systemd-container)"
    work="$(mktemp -d "$root/target/operations-doc.XXXXXX")"
    unshare --mount bash "$0" --boot "$work" >"$work.console" 2>&1 &
    boot=$!
    cleanup() {
        kill "$boot" 2>/dev/null || true
        wait "$boot" 2>/dev/null || true
        rm -rf "$work" "$work.console"
    }
    trap cleanup EXIT
    # The container's systemd: the child of systemd-nspawn, running.
    init=
    for _ in $(seq 600); do
        nspawn="$(pgrep -f "^systemd-nspawn -D $work/root" || true)"
        [ -n "$nspawn" ] && init="$(pgrep -P "$nspawn" | head -1 || true)"
        if [ -n "$init" ]; then
            state="$(nsenter -t "$init" -a systemctl is-system-running 2>/dev/null || true)"
            case "$state" in running|degraded) break ;; esac
        fi
        sleep 0.1
    done
    [ -n "$init" ] || { cat "$work.console"; fail "the container did not boot"; }
    echo "== container booted (systemd: $(nsenter -t "$init" -a systemctl is-system-running 2>/dev/null || true))"
    nsenter -t "$init" -a bash "$root/scripts/test-operations-doc.sh" --inside
    exit
    ;;
esac
[ "$(cat /proc/1/comm)" = systemd ] || fail "--inside runs in the container this script boots"
work="$(mktemp -d)"

# The commands of the blocks, in order, one per line (comments kept: bash
# ignores them, as it does when they are pasted).
mapfile -t lines < <(awk '/^```sh$/ {f = 1; next} /^```/ {f = 0} f && NF' "$root/docs/operations.md")
[ "${#lines[@]}" -gt 0 ] || fail "no sh block in docs/operations.md"

run() {  # run LINE DIR EXPECTED-STATUS: the line, pasted into bash in DIR
    local line="$1" dir="$2" want="$3" status=0
    echo "== \$ $line"
    (cd "$dir" && bash -c "$line") >"$work/out" 2>&1 || status=$?
    sed 's/^/   /' "$work/out" | tail -n 20
    [ "$status" -eq "$want" ] || fail "\`$line\` exited $status, expected $want"
}
said() { grep -qF -- "$1" "$work/out" || fail "the output lacks \"$1\""; }

# paiod's journal says it reloaded once more than before.
reloads=0
reloaded() {
    local n
    reloads=$((reloads + 1))
    for _ in $(seq 50); do
        n="$(journalctl -q -u paiod --no-pager | grep -c "configuration reloaded from /etc/paio/paiod.toml" || true)"
        [ "$n" -ge "$reloads" ] && return
        sleep 0.1
    done
    journalctl -q -u paiod --no-pager | tail -n 20
    fail "paiod did not say it reloaded ($n of $reloads reloads)"
}

scratch="$(mktemp -d)"
cp "$root/crates/paio-ffi/examples/c/example.c" "$scratch/"
cp "$root/policies/demo.toml" "$scratch/my-policy.toml"
ran=0
for line in "${lines[@]}"; do
    cmd="${line%%#*}"
    cmd="$(echo "$cmd" | sed 's/[[:space:]]*$//')"
    case "$cmd" in
    "make install")
        run "$line" "$root" 0
        [ -x /usr/local/bin/paio ] && [ -f /usr/local/lib/libpaio_preload.so ] || fail "nothing in /usr/local"
        [ -f /etc/paio/paiod.toml ] || fail "no /etc/paio/paiod.toml" ;;
    "make install PREFIX=/opt/paio")
        run "$line" "$root" 0
        [ -x /opt/paio/bin/paio ] || fail "nothing in /opt/paio" ;;
    "make install DESTDIR=/tmp/stage PREFIX=/usr")
        run "$line" "$root" 0
        [ -x /tmp/stage/usr/bin/paio ] && [ ! -e /usr/bin/paio ] || fail "not staged in /tmp/stage" ;;
    "make uninstall")
        run "$line" "$root" 0
        [ ! -e /usr/local/bin/paio ] && [ ! -e /usr/local/lib/libpaio_preload.so ] || fail "left in /usr/local"
        # What the next blocks use: an installed paio, as after a `make install`.
        (cd "$root" && make -s install >/dev/null) && ldconfig ;;
    'cc -std=c99 example.c $(pkg-config --cflags --libs paio) -o example')
        run "$line" "$scratch" 0
        (cd "$scratch" && ./example >/dev/null) || fail "the example built against /usr/local does not run" ;;
    "make deb")
        run "$line" "$root" 0
        ls "$root"/target/debian/paio_*_"$(dpkg --print-architecture)".deb >/dev/null || fail "no target/debian/paio_*.deb" ;;
    "systemctl daemon-reload")
        run "$line" "$root" 0 ;;
    "systemctl enable --now paiod.socket")
        run "$line" "$root" 0
        [ -S /run/paio/paiod.sock ] || fail "paiod.socket did not create /run/paio/paiod.sock"
        [ "$(systemctl is-active paiod.service || true)" = inactive ] || fail "paiod started before a stage connected" ;;
    "paio status")
        run "$line" "$root" 0
        said "policy"
        [ "$(systemctl is-active paiod.service)" = active ] || fail "paio status did not start paiod through its socket" ;;
    "systemctl reload paiod")
        run "$line" "$root" 0
        reloaded ;;
    "paiod --check-config /etc/paio/paiod.toml")
        run "$line" "$scratch" 0
        said "/etc/paio/paiod.toml: valid" ;;
    'kill -HUP "$(pidof paiod)"')
        [ "$(pidof paiod | wc -w)" -eq 1 ] || fail "not one paiod to signal: $(pidof paiod || true)"
        run "$line" "$scratch" 0
        reloaded ;;
    "paio doctor -- fio job.fio")
        run "$line" "$scratch" 0
        said "links libaio.so.1" ;;
    "paio doctor --policy my-policy.toml --control -- python3 train.py")
        run "$line" "$scratch" 0
        said "no problem found" ;;
    "paio doctor --pid 4242")
        # No process 4242 in this fresh pid namespace.
        run "$line" "$scratch" 1
        said "cannot read /proc/4242/maps" ;;
    *)
        fail "docs/operations.md shows \`$line\`, which this test does not know: add what it should do" ;;
    esac
    ran=$((ran + 1))
done
systemctl stop paiod.socket paiod.service
rm -rf "$scratch" "$work"
echo "test-operations-doc: ok ($ran commands)"

#!/usr/bin/env bash
# Runs every ```sh block of docs/rocksdb.md, as written, from the repository
# root, each in its own bash with -euo pipefail: a command in the guide that
# does not work fails the tests. Needs what build.sh built (the plugin, the
# preload library, target/release/libpaio.so) and db_bench.
# Usage: doc_commands.sh REPO_ROOT
set -euo pipefail
root="$1"
doc="$root/docs/rocksdb.md"
cd "$root"
for need in target/release/libpaio.so integrations/rocksdb/build/libpaio_rocksdb.so \
    integrations/rocksdb/build/libpaio_rocksdb_preload.so; do
    if [ ! -e "$need" ]; then
        echo "doc_commands.sh: $need is missing: the guide's commands assume the default" \
            "cargo target directory and integrations/rocksdb/build.sh's output" >&2
        exit 1
    fi
done
work="$(mktemp -d /tmp/paio-doc-commands.XXXXXX)"
trap 'rm -rf "$work"' EXIT
python3 - "$doc" "$work" <<'PY'
import sys, re
text = open(sys.argv[1]).read()
blocks = re.findall(r"^```sh\n(.*?)^```$", text, re.S | re.M)
for i, b in enumerate(blocks):
    open(f"{sys.argv[2]}/block{i:02d}.sh", "w").write(b)
print(f"{len(blocks)} shell blocks in {sys.argv[1]}")
PY
n=0
for block in "$work"/block*.sh; do
    n=$((n + 1))
    if ! bash -euo pipefail "$block" >"$work/out" 2>&1; then
        echo "docs/rocksdb.md: this block failed:" >&2
        cat "$block" >&2
        echo "--- its output:" >&2
        tail -30 "$work/out" >&2
        exit 1
    fi
    echo "ok: $(head -1 "$block")"
done
[ "$n" -ge 3 ] || { echo "doc_commands.sh: expected at least 3 shell blocks, found $n" >&2; exit 1; }
rm -rf /tmp/paio-app /tmp/paio-app-db /tmp/paio.ini /tmp/stats.json

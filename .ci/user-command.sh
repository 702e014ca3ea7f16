#!/usr/bin/env bash
# The README's first command, run as a new user would on this machine: the distribution's /usr/bin/python3
# (PEP 668, externally managed), `env -i`, a fresh HOME, a fresh clone, no uv on PATH. It must run and
# print the preflight table for glm53-flash (on a box without GPUs its checks fail: exit 1 is expected).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
command=$(grep -m1 '^python3 tools/uv.py run ' "$repo/README.md")
[[ -n $command ]] || { echo "user-command: the README has no 'python3 tools/uv.py run' line" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git clone -q "$repo" "$work/rigctl"
mkdir "$work/home"
keep=()  # the sandbox's TLS interception needs its CA bundle; a user's machine does not
[[ -n ${SSL_CERT_FILE:-} ]] && keep+=("SSL_CERT_FILE=$SSL_CERT_FILE")
echo "user-command: $command (env -i, /usr/bin/python3 $(/usr/bin/python3 -c 'import sys; print(sys.version.split()[0])'))" >&2
set +e
(cd "$work/rigctl" && env -i PATH=/usr/bin:/bin HOME="$work/home" "${keep[@]}" COLUMNS=100 \
    bash -c "${command/python3 /\/usr\/bin\/python3 }") >"$work/out" 2>"$work/err"
rc=$?
set -e
if [[ $rc -gt 1 ]] || ! grep -q '^preflight glm53-flash' "$work/out" || ! grep -qE '^check +result +message' "$work/out"; then
    echo "user-command: failed (exit $rc)" >&2
    tail -20 "$work/err" >&2
    head -20 "$work/out" >&2
    exit 1
fi
for dev in mypy ruff pytest hypothesis kubernetes_validate; do
    if compgen -G "$work/rigctl/.venv/lib/python3*/site-packages/$dev" >/dev/null; then
        echo "user-command: the user's environment got the dev dependency $dev" >&2
        exit 1
    fi
done
echo "user-command: ok (exit $rc, $(grep -cE '^[a-z0-9-]+ +(ok|warn|fail|skip|error) ' "$work/out") checks shown)" >&2

#!/usr/bin/env bash
# The project's one test command (README and .ci/run both call it). On a fresh Debian 12 or 13 machine it
# installs what the tests need, sets up the real testbed of the machine's own podman (4.3 on Debian 12, 5.4
# on Debian 13: /etc/os-release decides), with the quadlet generator, a `systemd --user` manager, the
# test-engine image and loopback sshd hosts, runs lint, types and the whole pytest suite; on Debian 12 it
# then runs the real-chain (integration) tests a second time on the podman 5 testbed (a trixie root, see
# docs/testbed.md); last, verify against a real llama.cpp server built meanwhile; and tears the testbeds down.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n=== %s (%ss)\n' "$*" "$SECONDS"; }

# Debian packages the tests need, installed where missing (apt's lists fetched first on a fresh machine)
apt_install() {
  local missing=() pkg
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  if ((${#missing[@]})); then
    log "apt-get install ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get -qq update >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get -qq install -y --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

if ! command -v uv >/dev/null 2>&1; then
  # a distribution's python3 refuses pip installs (PEP 668): tools/uv.py fetches uv from PyPI instead
  log "fetching uv (tools/uv.py)"
  python3 tools/uv.py --version
  export PATH="${XDG_CACHE_HOME:-$HOME/.cache}/rigctl/uv-$(sed -n 's/^VERSION = "\(.*\)".*/\1/p' tools/uv.py):$PATH"
fi
export PATH="$HOME/.local/bin:$PATH"

log "python environment"
uv sync --frozen --quiet --compile-bytecode

# The real llama-server for its interop test: its build (CPU only, -O1, cached in .cache/llama-server) runs
# in the background at the lowest priority while the suite runs, and is waited for at the end.
mkdir -p .cache
apt_install cmake ninja-build g++ make   # before the build starts: two apt-gets at once fight for dpkg's lock
log "llama-server build started in the background (log: .cache/llama-server.log)"
nice -n 19 bash .ci/llama-server.sh >.cache/llama-server.log 2>&1 &
llama_pid=$!

log "README command 1, as a new user runs it (/usr/bin/python3 under env -i, fresh HOME and clone)"
bash .ci/user-command.sh

# shellcheck disable=SC1091
codename="$(. /etc/os-release; echo "${VERSION_CODENAME:-}")"
log "testbed (the machine's own podman; /etc/os-release says ${codename:-?})"
bash .ci/testbed.sh up
trap 'bash .ci/testbed.sh down || true' EXIT
# shellcheck disable=SC1090
. "$(bash .ci/testbed.sh env)"
bash .ci/sshd-hosts.sh      # openssh for the loopback fleet hosts (no system sshd is started)
bash .ci/interop-env.sh     # a separate venv with transformers serve + a tiny local model (interop tests)
# Kubernetes' own YAML readers (sigs.k8s.io/yaml, yaml.v2/v3) for the manifest faithfulness test: Debian's
# packages, since the Go module proxy is not reachable
apt_install golang-go golang-gopkg-yaml.v2-dev golang-gopkg-yaml.v3-dev golang-github-ghodss-yaml-dev golang-k8s-sigs-yaml-dev

# The real chain again on podman 5 (the flavour rigctl renders by default): on Debian 12 in the trixie root,
# whose own systemd 257 manager, quadlet 5.4 and CDI resolver the tests drive from inside it. It runs in the
# background while lint, types and the suite run here: the root has its own network namespace, manager and
# container storage, so no port, unit or image is shared with the suite. On Debian 13 the suite below already
# is podman 5's.
p5_pid=""
if [ "$(bash .ci/testbed.sh env)" != "$(bash .ci/testbed.sh env --podman 5)" ]; then
  log "podman 5 testbed (Debian 13 root on this Debian 12 machine) and its real chain, in the background (log: .cache/podman5.log)"
  trap 'bash .ci/testbed.sh down --podman 5 || true; bash .ci/testbed.sh down || true' EXIT
  (
    bash .ci/testbed.sh up --podman 5 || exit 1
    echo "=== pytest: the real chain on podman 5.4 + systemd 257 (${SECONDS}s)"
    bash .ci/testbed.sh exec --podman 5 -- python -m pytest -p no:cacheprovider -m integration \
      tests/deploy tests/render/test_real_quadlet.py tests/doctor
  ) >.cache/podman5.log 2>&1 &
  p5_pid=$!
fi

log "ruff"
uv run --frozen ruff check src tests benchmarks tools
log "mypy"
uv run --frozen mypy
uv run --frozen mypy tools tests/support/nvml_fake.py tests/fakes.py  # tools and test support, strict too: the fakes are checked against the adapter Protocols (fake_adapters)

log "pytest"
export RIGCTL_REQUIRE_TESTBED=1  # everything above was installed: a skip for a missing part is a failure
set +e
# The llama-server interop test runs last, once its build is done (below).
uv run --frozen pytest -m "not llama_server" "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure, not a pass" >&2
  exit 1
fi

rc5=0
if [ -n "$p5_pid" ]; then
  log "waiting for the podman 5 real chain"
  set +e
  wait "$p5_pid"
  rc5=$?
  set -e
  cat .cache/podman5.log
  if [ "$rc5" -eq 5 ]; then
    echo "pytest collected no podman 5 tests: that is a failure, not a pass" >&2
    rc5=1
  fi
fi
log "waiting for the llama-server build"
rcl=0
if wait "$llama_pid"; then
  tail -3 .cache/llama-server.log
  log "pytest: verify against the real llama-server"
  set +e
  # RIGCTL_LLAMA_SERVER names the binary: a missing one fails the test instead of skipping it
  RIGCTL_LLAMA_SERVER="$PWD/.cache/llama-server/bin/llama-server" uv run --frozen pytest -m llama_server
  rcl=$?
  set -e
  if [ "$rcl" -eq 5 ]; then
    echo "pytest collected no llama-server tests: that is a failure, not a pass" >&2
    rcl=1
  fi
else
  echo "the llama-server build failed:" >&2
  tail -30 .cache/llama-server.log >&2
  rcl=1
fi
log "done (pytest exit $rc; podman 5 real chain exit $rc5; llama-server exit $rcl)"
[ "$rc" -ne 0 ] && exit "$rc"
[ "$rc5" -ne 0 ] && exit "$rc5"
exit "$rcl"

#!/usr/bin/env bash
# The real deployment testbed: podman 4.3 (runc, cgroupfs), trixie's quadlet generator, a real
# `systemd --user` manager and a locally built test-engine image. Run as root on Debian 12.
#
#   .ci/testbed.sh up      set everything up (idempotent; a few seconds when already done)
#   .ci/testbed.sh down    stop the manager and undo what `up` put under /run
#   .ci/testbed.sh env     print the environment file's path (source it before pytest)
#
# Why each piece looks the way it does is in ../shared/reference/testbed.md: crun fails on this cgroup
# v1 hybrid host, podman's default nofile ulimit exceeds the sandbox's hard limit, bookworm has no
# quadlet, PID 1 is not systemd, and no registry is reachable (so the image is built from a
# debootstrap rootfs whose tarball is cached).
#
# Everything the tests need lands in $RIGCTL_TESTBED_DIR/env (default <repo>/.testbed/env):
#   CONTAINERS_CONF, XDG_RUNTIME_DIR, RIGCTL_TESTBED=1, RIGCTL_TEST_ENGINE_IMAGE (pinned by digest).
# Knobs: RIGCTL_TEST_ENGINE (engine file baked into the image; default tests/engine/fake_vllm.py),
#        RIGCTL_TESTBED_CACHE (rootfs tarball cache; default <repo>/.cache/testbed).
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
bed="${RIGCTL_TESTBED_DIR:-$repo/.testbed}"
cache="${RIGCTL_TESTBED_CACHE:-$repo/.cache/testbed}"
engine_src="${RIGCTL_TEST_ENGINE:-$repo/tests/engine/fake_vllm.py}"
runtime_dir=/run/user/0
generator_dir=/run/systemd/user-generators
base_image=localhost/rigctl-testbed-base:bookworm
engine_image=localhost/rigctl-test-engine
pidfile="$bed/systemd-user.pid"

log() { echo "testbed: $*" >&2; }
die() { echo "testbed: error: $*" >&2; exit 1; }

need_root() { [[ $(id -u) -eq 0 ]] || die "run as root (the testbed drives podman and a systemd --user manager as root)"; }

install_packages() {
    local want=(podman runc uidmap fuse-overlayfs slirp4netns catatonit debootstrap) missing=()
    for pkg in "${want[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
    if ((${#missing[@]})); then
        log "apt-get install ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get -qq update >&2
        apt-get -qq install -y --no-install-recommends "${missing[@]}" >&2
    fi
}

write_containers_conf() {
    # Derive nofile from the hard limit we actually have: podman's default is above it here.
    local hard_nofile hard_nproc
    hard_nofile="$(ulimit -Hn)"; [[ $hard_nofile == unlimited ]] && hard_nofile=1048576
    ((hard_nofile > 1048576)) && hard_nofile=1048576
    hard_nproc="$(ulimit -Hu)"; [[ $hard_nproc == unlimited ]] && hard_nproc=32768
    ((hard_nproc > 32768)) && hard_nproc=32768
    mkdir -p "$bed"
    cat > "$bed/containers.conf.tmp" <<EOF
# Written by .ci/testbed.sh: podman settings this host needs (see shared/reference/testbed.md).
[containers]
default_ulimits = ["nofile=${hard_nofile}:${hard_nofile}", "nproc=${hard_nproc}:${hard_nproc}"]
# No journald on the testbed: keep container output readable through \`podman logs\`.
log_driver = "k8s-file"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
    mv -f "$bed/containers.conf.tmp" "$bed/containers.conf"
}

install_generator() {
    local quadlet
    quadlet="$("$repo/.ci/get-quadlet.sh")" || die "could not install the quadlet binary"
    mkdir -p "$generator_dir"
    # quadlet decides between system and user mode from its own name: it must contain "user".
    ln -sfn "$quadlet" "$generator_dir/podman-user-generator"
    echo "$quadlet" > "$bed/quadlet-path"
}

manager_env() {
    env -i HOME=/root USER=root LOGNAME=root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        XDG_RUNTIME_DIR="$runtime_dir" CONTAINERS_CONF="$bed/containers.conf" "$@"
}

manager_running() {
    [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null \
        && manager_env systemctl --user is-system-running >/dev/null 2>&1
}

start_manager() {
    mkdir -p /run/systemd/system "$runtime_dir"
    chmod 0700 "$runtime_dir"
    local adopted state0
    state0="$(manager_env systemctl --user is-system-running 2>/dev/null || true)"
    if manager_running; then
        log "systemd --user already running (pid $(cat "$pidfile"))"
    elif [[ $state0 == running || $state0 == degraded ]] \
        && adopted="$(pgrep -o -f '^/lib/systemd/systemd --user')"; then
        # a manager for this runtime dir is already answering (another checkout's testbed): a second one
        # would fight it for the same bus, so take it over instead
        log "adopting the systemd --user already running (pid $adopted)"
        echo "$adopted" > "$pidfile"
    else
        [[ -f $pidfile ]] && kill "$(cat "$pidfile")" 2>/dev/null || true
        log "starting systemd --user"
        # setsid: the manager must outlive this script and not take its terminal's signals.
        manager_env setsid /lib/systemd/systemd --user </dev/null >"$bed/systemd-user.log" 2>&1 &
        echo $! > "$pidfile"
        local i state=""
        for ((i = 0; i < 100; i++)); do
            state="$(manager_env systemctl --user is-system-running 2>/dev/null || true)"
            [[ $state == running || $state == degraded ]] && break
            sleep 0.1
        done
        [[ $state == running || $state == degraded ]] \
            || die "systemd --user did not come up (state '$state'); see $bed/systemd-user.log"
        # $! is setsid's (or env's) pid when setsid has to fork: record the manager itself, so `down` stops it
        pgrep -n -f '^/lib/systemd/systemd --user' > "$pidfile" || true
    fi
    # Services inherit the manager's environment; say it explicitly so podman in units sees the conf.
    manager_env systemctl --user set-environment CONTAINERS_CONF="$bed/containers.conf"
    manager_env systemctl --user daemon-reload
}

build_base_image() {
    if podman image exists "$base_image"; then return; fi
    local tarball="$cache/base-bookworm-python3.tar"
    if [[ ! -s $tarball ]]; then
        local mirror rootfs
        mirror="$(grep -rhoE '^URIs:\s*\S+/debian/?$' /etc/apt/sources.list.d/ 2>/dev/null | head -1 | awk '{print $2}')"
        [[ -n $mirror ]] || mirror="$(grep -rhoE '^deb\s+\S+/debian/?\s+bookworm\s' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null | head -1 | awk '{print $2}')"
        [[ -n $mirror ]] || die "found no Debian mirror URI in /etc/apt/sources.list.d"
        mkdir -p "$cache"
        rootfs="$(mktemp -d /var/tmp/rigctl-rootfs.XXXXXX)"
        log "debootstrap bookworm with python3 from $mirror (about a minute; cached afterwards in $tarball)"
        debootstrap --variant=minbase --include=python3 bookworm "$rootfs" "$mirror" >"$cache/debootstrap.log" 2>&1 \
            || die "debootstrap failed; see $cache/debootstrap.log"
        tar -C "$rootfs" -cf "$tarball.partial" .
        mv -f "$tarball.partial" "$tarball"
        rm -rf "$rootfs"
    fi
    log "podman import $tarball"
    podman import "$tarball" "$base_image" >/dev/null
}

build_engine_image() {
    [[ -f $engine_src ]] || die "test engine $engine_src not found (set RIGCTL_TEST_ENGINE)"
    local sum have shim="$repo/.ci/testbed/vllm-entrypoint.py"
    sum="$(cat "$engine_src" "$shim" | sha256sum | cut -d' ' -f1)"
    have="$(podman image inspect --format '{{index .Labels "rigctl.test-engine.sha256"}}' "$engine_image:latest" 2>/dev/null || true)"
    if [[ $have != "$sum" ]]; then
        log "building $engine_image from $engine_src"
        local ctx
        ctx="$(mktemp -d)"
        cp "$engine_src" "$ctx/engine.py"
        cp "$shim" "$ctx/entrypoint.py"
        cat > "$ctx/Containerfile" <<EOF
FROM $base_image
COPY engine.py entrypoint.py /opt/rigctl-test-engine/
LABEL rigctl.test-engine.sha256=$sum
# The entrypoint takes vLLM's command line, as rigctl renders it, and runs the test engine.
ENTRYPOINT ["python3", "-u", "/opt/rigctl-test-engine/entrypoint.py"]
EOF
        podman build -q -t "$engine_image:latest" "$ctx" >/dev/null
        rm -rf "$ctx"
    fi
    local digest
    digest="$(podman image inspect --format '{{.Digest}}' "$engine_image:latest")"
    [[ $digest == sha256:* ]] || die "image $engine_image has no digest ('$digest')"
    echo "$engine_image@$digest"
}

write_env() {
    local image="$1"
    cat > "$bed/env.tmp" <<EOF
# Written by .ci/testbed.sh up; source it before running the integration tests.
export RIGCTL_TESTBED=1
export CONTAINERS_CONF=$bed/containers.conf
export XDG_RUNTIME_DIR=$runtime_dir
export RIGCTL_TEST_ENGINE_IMAGE=$image
export RIGCTL_QUADLET=$(cat "$bed/quadlet-path")
EOF
    mv -f "$bed/env.tmp" "$bed/env"
}

cmd_up() {
    need_root
    local t0=$SECONDS
    mkdir -p "$bed"
    install_packages
    write_containers_conf
    export CONTAINERS_CONF="$bed/containers.conf"
    install_generator
    start_manager
    build_base_image
    local image
    image="$(build_engine_image)"
    write_env "$image"
    log "up in $((SECONDS - t0)) s; image $image; env in $bed/env"
}

cmd_down() {
    need_root
    export CONTAINERS_CONF="$bed/containers.conf"
    if [[ -f $pidfile ]]; then
        local pid
        pid="$(cat "$pidfile")"
        if kill -0 "$pid" 2>/dev/null; then
            # Stop our services through the manager first so their containers go with them.
            manager_env timeout 60 systemctl --user stop 'rigctl-*.service' 2>/dev/null || true
            kill -TERM "$pid" 2>/dev/null || true
            for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -KILL "$pid" 2>/dev/null || true
        fi
        rm -f "$pidfile"
    fi
    # Containers the tests started that outlived their units.
    podman ps -a --filter label=rigctl.managed --format '{{.Names}}' 2>/dev/null \
        | xargs -r podman rm -f -t 5 >/dev/null 2>&1 || true
    rm -f "$generator_dir/podman-user-generator"
    rmdir "$generator_dir" 2>/dev/null || true
    # It persists on this machine and makes tools believe systemd is PID 1.
    rm -rf /run/systemd/system
    rm -f "$bed/env"
    log "down"
}

case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    env) echo "$bed/env" ;;
    *) echo "usage: $0 up|down|env" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# The real deployment testbed, in one of two flavours (docs/testbed.md says why each piece is as it is):
#   podman 4: the host's podman 4.3 (runc, cgroupfs), trixie's quadlet generator, a real `systemd --user`
#             manager and a locally built test-engine image. Debian 12 only (Debian 13 has no podman 4).
#   podman 5: podman 5.4 with its own conmon/runc/netavark, quadlet 5.4 and systemd 257's `systemd --user`:
#             on Debian 12 in a debootstrapped trixie root (a chroot with its own network namespace, so its
#             ports, manager and sockets cannot be mistaken for the host's); on Debian 13 the host's own.
# Run as root.
#
#   .ci/testbed.sh up [--podman 4|5]     set it up (idempotent; seconds when already done). Default: 4 on
#                                        Debian 12, 5 on Debian 13
#   .ci/testbed.sh down [--podman 4|5]   stop its manager and undo what `up` put under /run (and the mounts)
#   .ci/testbed.sh env [--podman 4|5]    print the flavour's environment file's path
#   .ci/testbed.sh exec [--podman 4|5] [--] CMD...
#                                        run CMD where that flavour's rigctl and tests run, with its
#                                        environment: for podman 5 on Debian 12, inside the trixie root (the
#                                        repository is mounted there at the same path, with its own venv)
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

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
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

# /etc/os-release decides, never an assumption: Debian 12 (bookworm) has podman 4.3 and needs trixie's
# quadlet; Debian 13 (trixie) has podman 5.4, its quadlet and systemd 257 from apt.
os_codename() {
    local file="${RIGCTL_OS_RELEASE:-/etc/os-release}" id="" codename="" version=""
    if [[ -r $file ]]; then
        # shellcheck disable=SC1090
        id="$(. "$file"; echo "${ID:-}")"; codename="$(. "$file"; echo "${VERSION_CODENAME:-}")"
        # shellcheck disable=SC1090
        version="$(. "$file"; echo "${VERSION_ID:-}")"
    fi
    [[ $id == debian ]] || { echo "unsupported:${id:-unknown}"; return; }
    case "$codename:$version" in
        bookworm:* | :12*) echo bookworm ;;
        trixie:* | :13*) echo trixie ;;
        *) echo "unsupported:debian-${codename:-$version}" ;;
    esac
}

install_host_packages() {
    local missing=() pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
    if ((${#missing[@]})); then
        log "apt-get install ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get -qq update >&2
        apt-get -qq install -y --no-install-recommends "${missing[@]}" >&2
    fi
}

host_packages() {
    if [[ $codename == trixie ]]; then
        # podman 5.4 with its own helpers; runc because crun refuses a cgroup v1 hybrid host; nft for netavark
        echo podman runc crun conmon netavark aardvark-dns uidmap fuse-overlayfs passt catatonit nftables \
            dbus-user-session debootstrap
    else
        echo podman runc uidmap fuse-overlayfs slirp4netns catatonit debootstrap
    fi
}

install_packages() {
    # shellcheck disable=SC2046
    install_host_packages $(host_packages)
}

write_containers_conf_to() {
    # Derive nofile from the hard limit we actually have: podman's default is above it here.
    local dest="$1" what="$2" hard_nofile hard_nproc
    hard_nofile="$(ulimit -Hn)"; [[ $hard_nofile == unlimited ]] && hard_nofile=1048576
    ((hard_nofile > 1048576)) && hard_nofile=1048576
    hard_nproc="$(ulimit -Hu)"; [[ $hard_nproc == unlimited ]] && hard_nproc=32768
    ((hard_nproc > 32768)) && hard_nproc=32768
    mkdir -p "$(dirname "$dest")"
    cat > "$dest.tmp" <<EOF
# Written by .ci/testbed.sh ($what): podman settings this host needs (docs/testbed.md).
[containers]
default_ulimits = ["nofile=${hard_nofile}:${hard_nofile}", "nproc=${hard_nproc}:${hard_nproc}"]
# No journald on the testbed: keep container output readable through \`podman logs\`.
log_driver = "k8s-file"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
    mv -f "$dest.tmp" "$dest"
}

write_containers_conf() {
    mkdir -p "$bed"
    write_containers_conf_to "$bed/containers.conf" "pointed to by CONTAINERS_CONF"
}

install_generator() {
    local quadlet
    if [[ $codename == trixie ]]; then
        # trixie's podman ships quadlet and installs it as the user generator itself: nothing to fetch
        quadlet=/usr/libexec/podman/quadlet
        [[ -x $quadlet ]] || die "$quadlet missing: is trixie's podman installed?"
        echo "$quadlet" > "$bed/quadlet-path"
        return
    fi
    quadlet="$("$repo/.ci/get-quadlet.sh")" || die "could not install the quadlet binary"
    mkdir -p "$generator_dir"
    # quadlet decides between system and user mode from its own name: it must contain "user".
    ln -sfn "$quadlet" "$generator_dir/podman-user-generator"
    echo "$quadlet" > "$bed/quadlet-path"
}

manager_env() {
    env -i HOME=/root USER=root LOGNAME=root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        XDG_RUNTIME_DIR="$runtime_dir" CONTAINERS_CONF="$bed/containers.conf" PODMAN_IGNORE_CGROUPSV1_WARNING=1 "$@"
}

# The host's `systemd --user` manager (the oldest; the newest with -n). A podman 5 testbed's manager in its
# trixie root has the same command line but another root, and is never taken for this one.
host_manager_pid() {
    local pid found=()
    for pid in $(pgrep -f '^/lib/systemd/systemd --user' || true); do
        [[ $(readlink "/proc/$pid/root" 2>/dev/null) == / ]] && found+=("$pid")
    done
    ((${#found[@]})) || return 1
    if [[ ${1:-} == -n ]]; then echo "${found[-1]}"; else echo "${found[0]}"; fi
}

# A testbed's `systemd --user` in a cgroup of its own. A user manager that is not under user@.service takes the
# cgroup it starts in (less a trailing /init.scope) as its root, so two started from one shell (the podman 4.3
# and the podman 5 testbed, which CI runs at the same time) share a root: a unit of the same name under both
# (the real-chain tests use the same names on both flavours) is then one cgroup, and either manager's stop or
# restart of it kills the other's engine. NAME carries the checkout's path sum: two checkouts' testbeds too.
# Moves the calling (sub)shell into /NAME of every hierarchy.
enter_own_cgroup() {
    local name=$1 h
    if [[ -f /sys/fs/cgroup/cgroup.procs ]]; then  # unified (cgroup v2)
        mkdir -p "/sys/fs/cgroup/$name" && echo "$BASHPID" > "/sys/fs/cgroup/$name/cgroup.procs"
        return
    fi
    for h in /sys/fs/cgroup/*/; do
        [[ -f ${h}cgroup.procs && ! -L ${h%/} ]] || continue
        mkdir -p "$h$name" 2>/dev/null || continue
        if [[ -f $h$name/cpuset.cpus && -z $(<"$h$name/cpuset.cpus") ]]; then  # v1 cpuset: empty until set
            cat "${h}cpuset.cpus" > "$h$name/cpuset.cpus"
            cat "${h}cpuset.mems" > "$h$name/cpuset.mems"
        fi
        echo "$BASHPID" > "$h$name/cgroup.procs" 2>/dev/null || true
    done
    grep -q ":/$name\$" /proc/"$BASHPID"/cgroup || die "could not move the manager into a cgroup of its own ($name)"
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
        && adopted="$(host_manager_pid)"; then
        # a manager for this runtime dir is already answering (another checkout's testbed): a second one
        # would fight it for the same bus, so take it over instead
        log "adopting the systemd --user already running (pid $adopted)"
        echo "$adopted" > "$pidfile"
    else
        [[ -f $pidfile ]] && kill "$(cat "$pidfile")" 2>/dev/null || true
        log "starting systemd --user"
        # setsid: the manager must outlive this script and not take its terminal's signals.
        (enter_own_cgroup "rigctl-testbed-podman4-$(cksum <<<"$repo" | cut -d" " -f1)"; manager_env setsid /lib/systemd/systemd --user) \
            </dev/null >"$bed/systemd-user.log" 2>&1 &
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
        host_manager_pid -n > "$pidfile" || true
    fi
    if [[ $codename == trixie ]]; then
        # podman 5 as root asks the system manager for its health-check timers: with none here (PID 1 is not
        # systemd) its socket's name leads to the user manager's. quadlet 5.4's
        # podman-user-wait-network-online.service polls a system manager for 90 s: masked, at runtime only.
        if [[ ! -e /run/systemd/private ]]; then
            ln -sfn "$runtime_dir/systemd/private" /run/systemd/private
            echo /run/systemd/private >> "$bed/made-links"
        fi
        mkdir -p /run/systemd/user
        ln -sfn /dev/null /run/systemd/user/podman-user-wait-network-online.service
        echo /run/systemd/user/podman-user-wait-network-online.service >> "$bed/made-links"
        # the stand-in GPU, in the runtime CDI directory: gone with `down`
        write_cdi_spec /run/cdi/rigctl-testbed.yaml
        echo /run/cdi/rigctl-testbed.yaml >> "$bed/made-links"
        manager_env systemctl --user daemon-reload
    fi
    # Services inherit the manager's environment; say it explicitly so podman in units sees the conf.
    manager_env systemctl --user set-environment CONTAINERS_CONF="$bed/containers.conf"
    manager_env systemctl --user daemon-reload
}

# CDI for real: a spec naming nvidia.com/gpu devices (by UUID and by index) whose device node is a harmless
# stand-in (/dev/null seen as /dev/nvidia-testbed0), so AddDevice=nvidia.com/gpu=UUID goes through podman's own
# CDI resolver. Only podman 5 flavours write it (the 4.3 testbed's tests never ask for a GPU).
cdi_uuid=GPU-5f1c0de0-0000-4000-8000-00000000beef
write_cdi_spec() {
    mkdir -p "$(dirname "$1")"
    cat > "$1" <<EOF
# Written by .ci/testbed.sh up --podman 5: a stand-in GPU for the CDI resolver (no NVIDIA device here).
cdiVersion: "0.6.0"
kind: nvidia.com/gpu
devices:
  - name: "$cdi_uuid"
    containerEdits:
      deviceNodes:
        - path: /dev/nvidia-testbed0
          hostPath: /dev/null
      env:
        - RIGCTL_TESTBED_CDI_DEVICE=$cdi_uuid
  - name: "0"
    containerEdits:
      deviceNodes:
        - path: /dev/nvidia-testbed0
          hostPath: /dev/null
      env:
        - RIGCTL_TESTBED_CDI_DEVICE=0
containerEdits:
  env:
    - NVIDIA_VISIBLE_DEVICES=void
EOF
}

debian_mirror() {
    local mirror
    mirror="$(grep -rhoE '^URIs:\s*\S+/debian/?$' /etc/apt/sources.list.d/ 2>/dev/null | head -1 | awk '{print $2}')"
    [[ -n $mirror ]] || mirror="$(grep -rhoE '^deb\s+\S+/debian/?\s+[a-z]+\s' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null | head -1 | awk '{print $2}')"
    [[ -n $mirror ]] || die "found no Debian mirror URI in /etc/apt/sources.list.d"
    echo "$mirror"
}

# The podman that builds the images: the host's, or (podman 5 on Debian 12) the trixie root's.
PODMAN=(podman)

build_base_image() {
    if "${PODMAN[@]}" image exists "$base_image"; then return; fi
    local tarball="$cache/base-bookworm-python3.tar"
    if [[ ! -s $tarball ]]; then
        local mirror rootfs
        mirror="$(debian_mirror)"
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
    "${PODMAN[@]}" import - "$base_image" < "$tarball" >/dev/null
}

build_engine_image() {
    [[ -f $engine_src ]] || die "test engine $engine_src not found (set RIGCTL_TEST_ENGINE)"
    local sum have shim="$repo/.ci/testbed/vllm-entrypoint.py"
    sum="$(cat "$engine_src" "$shim" | sha256sum | cut -d' ' -f1)"
    have="$("${PODMAN[@]}" image inspect --format '{{index .Labels "rigctl.test-engine.sha256"}}' "$engine_image:latest" 2>/dev/null || true)"
    if [[ $have != "$sum" ]]; then
        log "building $engine_image from $engine_src"
        local ctx inside
        # IMAGE_CTX_PARENT/IMAGE_CTX_INSIDE: one directory as the host and as the building podman name it
        ctx="$(mktemp -d "${IMAGE_CTX_PARENT:-/tmp}/rigctl-engine.XXXXXX")"
        inside="${IMAGE_CTX_INSIDE:+$IMAGE_CTX_INSIDE/$(basename "$ctx")}"
        cp "$engine_src" "$ctx/engine.py"
        cp "$shim" "$ctx/entrypoint.py"
        cat > "$ctx/Containerfile" <<EOF
FROM $base_image
COPY engine.py entrypoint.py /opt/rigctl-test-engine/
LABEL rigctl.test-engine.sha256=$sum
# The entrypoint takes vLLM's command line, as rigctl renders it, and runs the test engine.
ENTRYPOINT ["python3", "-u", "/opt/rigctl-test-engine/entrypoint.py"]
EOF
        "${PODMAN[@]}" build -q -t "$engine_image:latest" "${inside:-$ctx}" >/dev/null
        rm -rf "$ctx"
    fi
    local digest
    digest="$("${PODMAN[@]}" image inspect --format '{{.Digest}}' "$engine_image:latest")"
    [[ $digest == sha256:* ]] || die "image $engine_image has no digest ('$digest')"
    echo "$engine_image@$digest"
}

write_env() {
    local image="$1"
    cat > "$bed/env.tmp" <<EOF
# Written by .ci/testbed.sh up; source it before running the integration tests.
export RIGCTL_TESTBED=1
export RIGCTL_TESTBED_FLAVOUR=podman$native_major
$([[ $native_major == 5 ]] && echo "export RIGCTL_TESTBED_CDI_GPU=$cdi_uuid")
export CONTAINERS_CONF=$bed/containers.conf
export PODMAN_IGNORE_CGROUPSV1_WARNING=1
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
    if [[ -f $bed/made-links ]]; then
        xargs -r rm -f < "$bed/made-links"
        rm -f "$bed/made-links"
    fi
    rm -f "$generator_dir/podman-user-generator"
    rmdir "$generator_dir" 2>/dev/null || true
    # It persists on this machine and makes tools believe systemd is PID 1.
    rm -rf /run/systemd/system
    rm -f "$bed/env"
    log "down"
}

usage() { echo "usage: $0 up|down|env [--podman 4|5]  |  $0 exec [--podman 4|5] [--] CMD..." >&2; exit 2; }

cmd="${1:-}"; (($#)) && shift
flavour=""
while (($#)); do
    case "$1" in
        --podman) [[ $# -ge 2 ]] || usage; flavour="$2"; shift 2 ;;
        --podman=*) flavour="${1#--podman=}"; shift ;;
        --) shift; break ;;
        *) [[ $cmd == exec ]] && break; usage ;;
    esac
done
codename="$(os_codename)"
case "$codename" in
    bookworm) native_major=4 ;;
    trixie) native_major=5 ;;
    *) die "this testbed needs Debian 12 (bookworm) or 13 (trixie); /etc/os-release says ${codename#unsupported:}" ;;
esac
flavour="${flavour:-$native_major}"
[[ $flavour == 4 || $flavour == 5 ]] || die "--podman takes 4 or 5, not '$flavour'"
if [[ $flavour == 4 && $native_major == 5 ]]; then
    die "no podman 4 testbed on Debian 13: its podman is 5.4 (use --podman 5, the default here)"
fi

if [[ $flavour == "$native_major" ]]; then
    case "$cmd" in
        up) cmd_up ;;
        down) cmd_down ;;
        env) echo "$bed/env" ;;
        exec)
            (($#)) || die "exec: give a command"
            [[ -f $bed/env ]] || die "no testbed here: bash .ci/testbed.sh up"
            # shellcheck disable=SC1091
            set -a; . "$bed/env"; set +a
            exec "$@" ;;
        *) usage ;;
    esac
else
    # podman 5 on Debian 12: the trixie root
    # shellcheck source=.ci/testbed-podman5.sh
    . "$repo/.ci/testbed-podman5.sh"
    case "$cmd" in
        up) need_root; p5_up ;;
        down) need_root; p5_down ;;
        env) echo "$p5_dir/env" ;;
        exec) need_root; p5_exec "$@" ;;
        *) usage ;;
    esac
fi

# shellcheck shell=bash
# The podman 5 testbed on a Debian 12 host: a debootstrapped Debian 13 (trixie) root with podman 5.4.2 (its
# own conmon, runc, netavark, aardvark-dns), systemd 257 and the quadlet 5.4 generator trixie ships, entered
# with chroot inside a network namespace of its own. Sourced by .ci/testbed.sh (which defines log, die, repo,
# bed, cache, engine_src, debian_mirror, write_containers_conf_to, build_base_image, build_engine_image);
# docs/testbed.md says why each step is there.
#
# Why a chroot and not wrappers: rigctl reads the machine directly, not only through podman and systemctl
# (/etc/cdi, /run/systemd/*, the generator directories, /proc/net/tcp for port owners, the manager's
# private socket under $XDG_RUNTIME_DIR). Inside the root every one of those is the trixie machine's, so the
# test process (pytest, with a venv of its own made by uv from trixie's python3.13) runs in there too, and
# the repository is mounted at the same path. Why a network namespace: the 4.3 testbed (and other checkouts'
# tests) publish the same 127.0.0.1 ports on the host; in here they cannot collide, and nothing in here can
# reach the host's manager by mistake (its runtime directory is /run/testbed5/user/0, which the host has not).

p5_dir="$bed/podman5"
p5_root="$p5_dir/root"
p5_netns="$p5_dir/netns"
p5_pidfile="$p5_dir/systemd-user.pid"
p5_tarball="$cache/rootfs-trixie-podman5.tar"
p5_runtime=/run/testbed5/user/0      # inside the root
p5_venv=/opt/rigctl-venv            # inside the root: trixie's python 3.13, the project's locked dependencies
p5_uv_cache=/var/cache/rigctl-uv    # inside the root: the host's uv cache, mounted
p5_marker=/etc/rigctl-testbed5      # inside the root: says what this root is
# runc: crun refuses a cgroup v1 hybrid host; nftables: netavark needs `nft`; iproute2: `ip link set lo up`
# in the fresh network namespace; procps: pgrep/kill for the tests; python3: the test process.
p5_packages=podman,crun,runc,conmon,netavark,aardvark-dns,catatonit,fuse-overlayfs,uidmap,systemd,systemd-sysv,dbus,dbus-user-session,ca-certificates,nftables,iptables,passt,python3,procps,iproute2

p5_base_env() {
    printf '%s\n' HOME=/root USER=root LOGNAME=root LANG=C.UTF-8 \
        PATH=$p5_venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        XDG_RUNTIME_DIR=$p5_runtime PODMAN_IGNORE_CGROUPSV1_WARNING=1
}

# A command inside the root, in its network namespace, with a clean environment (plus "$@"'s NAME=VALUE).
p5_in() {
    local envs=()
    mapfile -t envs < <(p5_base_env)
    nsenter --net="$p5_netns" -- chroot "$p5_root" env -i "${envs[@]}" "$@"
}

# The same, in the host's network namespace: only for fetching (apt, uv sync), never for the testbed itself.
p5_in_hostnet() {
    local envs=()
    mapfile -t envs < <(p5_base_env)
    chroot "$p5_root" env -i "${envs[@]}" "$@"
}

p5_build_root() {
    if [[ -f $p5_root$p5_marker ]]; then return; fi
    if [[ ! -s $p5_tarball ]]; then
        local mirror tmp
        mirror="$(debian_mirror)"
        mkdir -p "$cache"
        tmp="$(mktemp -d /var/tmp/rigctl-trixie.XXXXXX)"
        log "debootstrap trixie with podman 5.4 and systemd 257 from $mirror (a few minutes; cached in $p5_tarball)"
        debootstrap --variant=minbase --include="$p5_packages" trixie "$tmp" "$mirror" \
            >"$cache/debootstrap-trixie.log" 2>&1 || die "debootstrap failed; see $cache/debootstrap-trixie.log"
        grep -q " $tmp/" /proc/mounts && die "debootstrap left mounts under $tmp"
        rm -rf "$tmp/var/cache/apt/archives/"*.deb "$tmp/var/lib/apt/lists/"*_Packages
        echo "trixie root of rigctl's podman 5 testbed (.ci/testbed.sh up --podman 5), from $mirror" > "$tmp$p5_marker"
        tar -C "$tmp" --numeric-owner -cf "$p5_tarball.partial" .
        mv -f "$p5_tarball.partial" "$p5_tarball"
        rm -rf --one-file-system "$tmp"
    fi
    log "unpacking $p5_tarball into $p5_root"
    rm -rf --one-file-system "$p5_root"
    mkdir -p "$p5_root"
    tar -C "$p5_root" --numeric-owner -xpf "$p5_tarball"
    [[ -f $p5_root$p5_marker ]] || die "$p5_tarball holds no $p5_marker: remove it and run up again"
}

p5_mount() {
    local r=$p5_root
    # The root on itself first: podman's layer unpacking remounts / and fails on a plain directory
    # (`remount /, flags: 0x44000: invalid argument`). Private, so nothing below it propagates anywhere.
    mountpoint -q "$r" || { mount --bind "$r" "$r"; mount --make-private "$r"; }
    mountpoint -q "$r/proc" || mount -t proc proc "$r/proc"
    # rslave: an unmount in here must never travel back to the host's /sys or /dev.
    mountpoint -q "$r/sys" || { mount --rbind /sys "$r/sys"; mount --make-rslave "$r/sys"; }
    mountpoint -q "$r/dev" || { mount --rbind /dev "$r/dev"; mount --make-rslave "$r/dev"; }
    mountpoint -q "$r/run" || mount -t tmpfs -o mode=0755 tmpfs "$r/run"
    mkdir -p "$r$repo" "$r$p5_uv_cache"
    mountpoint -q "$r$repo" || mount --bind "$repo" "$r$repo"
    local uv_cache
    uv_cache="$(uv cache dir 2>/dev/null || true)"
    if [[ -n $uv_cache ]]; then
        mkdir -p "$uv_cache"
        mountpoint -q "$r$p5_uv_cache" || mount --bind "$uv_cache" "$r$p5_uv_cache"
    fi
    # The host's trust store (a proxy's CA, where there is one) for uv's downloads; apt in here uses its own.
    cp -f /etc/ssl/certs/ca-certificates.crt "$r/etc/ssl/certs/host-ca-certificates.crt"
    cp -f /etc/resolv.conf "$r/etc/resolv.conf"
}

p5_netns_up() {
    if [[ -e $p5_netns ]] && nsenter --net="$p5_netns" -- true 2>/dev/null; then return; fi
    rm -f "$p5_netns"
    touch "$p5_netns"
    # A namespace kept alive by its bind mount on $p5_netns: loopback only, podman adds its bridge.
    unshare --net="$p5_netns" -- chroot "$p5_root" ip link set lo up
}

p5_configure() {
    local r=$p5_root
    write_containers_conf_to "$r/etc/containers/containers.conf" "/etc/containers/containers.conf in the testbed's trixie root"
    mkdir -p "$r$p5_runtime" "$r/run/systemd/system"
    chmod 0700 "$r$p5_runtime"
    # Root's podman asks the *system* manager (/run/systemd/private) for its transient health-check timers;
    # there is none in here, so that name leads to the user manager's socket: the timers land there, health
    # checks run, and Notify=healthy can signal. (rigctl in here therefore sees a "system manager" answer.)
    ln -sfn "$p5_runtime/systemd/private" "$r/run/systemd/private"
    # quadlet 5.4's user units wait for network-online.target through this unit, which polls a system manager
    # for 90 s; with none it held each restart in auto-restart-queued. Masked in the root's own /etc.
    mkdir -p "$r/etc/systemd/user"
    ln -sfn /dev/null "$r/etc/systemd/user/podman-user-wait-network-online.service"
    # CDI for real, in the root's own /etc/cdi (write_cdi_spec says what it holds)
    write_cdi_spec "$r/etc/cdi/rigctl-testbed.yaml"
}

p5_manager_pid() {
    # the manager whose root is ours (the host's own `systemd --user` has the same command line)
    local pid
    for pid in $(pgrep -f '^/lib/systemd/systemd --user' || true); do
        [[ $(readlink "/proc/$pid/root" 2>/dev/null) == "$p5_root" ]] && { echo "$pid"; return 0; }
    done
    return 1
}

p5_start_manager() {
    local state pid
    state="$(p5_in systemctl --user is-system-running 2>/dev/null || true)"
    if pid="$(p5_manager_pid)" && [[ $state == running || $state == degraded ]]; then
        log "podman 5: systemd --user already running (pid $pid)"
    else
        log "podman 5: starting systemd 257 --user in the trixie root"
        local envs=()
        mapfile -t envs < <(p5_base_env)
        (enter_own_cgroup "rigctl-testbed-podman5-$(cksum <<<"$repo" | cut -d" " -f1)"
         exec nsenter --net="$p5_netns" -- chroot "$p5_root" env -i "${envs[@]}" setsid /lib/systemd/systemd --user) \
            </dev/null >"$p5_dir/systemd-user.log" 2>&1 &
        local i
        for ((i = 0; i < 100; i++)); do
            state="$(p5_in systemctl --user is-system-running 2>/dev/null || true)"
            [[ $state == running || $state == degraded ]] && break
            sleep 0.1
        done
        [[ $state == running || $state == degraded ]] \
            || die "podman 5: systemd --user did not come up (state '$state'); see $p5_dir/systemd-user.log"
    fi
    p5_manager_pid > "$p5_pidfile" || die "podman 5: the manager answers but no process of the root runs it"
    p5_in systemctl --user daemon-reload
}

p5_venv() {
    # The project's locked dependencies for trixie's python 3.13 (uv from the host; its cache mounted, so a
    # second up only links). In the host's network namespace: PyPI is out there.
    local uv_bin
    uv_bin="$(type -P uv)" || die "uv not found on PATH"
    if [[ $(head -c4 "$uv_bin" | od -An -c | tr -d ' ') != 177ELF ]] && command -v pyenv >/dev/null; then
        uv_bin="$(pyenv which uv)"  # a pyenv shim is a script; the root needs the binary
    fi
    install -m 0755 "$uv_bin" "$p5_root/usr/local/bin/uv"
    log "podman 5: uv sync into $p5_venv (python3.13 of the root)"
    p5_in_hostnet env SSL_CERT_FILE=/etc/ssl/certs/host-ca-certificates.crt UV_CACHE_DIR="$p5_uv_cache" \
        UV_PROJECT_ENVIRONMENT="$p5_venv" UV_PYTHON=/usr/bin/python3 UV_PYTHON_DOWNLOADS=never UV_LINK_MODE=copy \
        sh -c 'cd "$1" && uv sync --frozen --quiet' sh "$repo" >&2 || die "podman 5: uv sync in the root failed"
}

p5_write_env() {
    local image="$1"
    cat > "$p5_dir/env.tmp" <<EOF
# Written by .ci/testbed.sh up --podman 5. Valid INSIDE the trixie root only: use
#   bash .ci/testbed.sh exec --podman 5 -- CMD...
# which enters the root and its network namespace and sources this file there.
export RIGCTL_TESTBED=1
export RIGCTL_TESTBED_FLAVOUR=podman5
export RIGCTL_TESTBED_ENV=$p5_dir/env
export RIGCTL_TESTBED_MARKER=$p5_marker
export RIGCTL_TESTBED_CDI_GPU=$cdi_uuid
export CONTAINERS_CONF=/etc/containers/containers.conf
export XDG_RUNTIME_DIR=$p5_runtime
export PODMAN_IGNORE_CGROUPSV1_WARNING=1
export RIGCTL_TEST_ENGINE_IMAGE=$image
export RIGCTL_QUADLET=/usr/libexec/podman/quadlet
export UV_PROJECT_ENVIRONMENT=$p5_venv
export UV_PYTHON=/usr/bin/python3
export UV_PYTHON_DOWNLOADS=never
export UV_CACHE_DIR=$p5_uv_cache
export UV_LINK_MODE=copy
EOF
    mv -f "$p5_dir/env.tmp" "$p5_dir/env"
}

p5_up() {
    local t0=$SECONDS
    command -v debootstrap >/dev/null || install_host_packages debootstrap
    mkdir -p "$p5_dir"
    p5_build_root
    p5_mount
    p5_netns_up
    p5_configure
    p5_start_manager
    PODMAN=(p5_in podman)
    build_base_image
    local image
    image="$(IMAGE_CTX_PARENT="$p5_root/tmp" IMAGE_CTX_INSIDE=/tmp build_engine_image)"
    p5_venv
    p5_write_env "$image"
    log "podman 5 up in $((SECONDS - t0)) s: $(p5_in podman --version), $(p5_in systemctl --version | head -1); image $image; env in $p5_dir/env"
}

p5_exec() {
    [[ -f $p5_dir/env ]] || die "no podman 5 testbed here: bash .ci/testbed.sh up --podman 5"
    (($#)) || die "exec: give a command"
    local cwd=$PWD
    [[ $cwd == "$repo" || $cwd == "$repo"/* ]] || cwd=$repo
    local pass=() name
    # what a caller may hand through (CI's strictness, pytest's options); nothing else of the host's
    for name in RIGCTL_REQUIRE_TESTBED PYTEST_ADDOPTS TERM COLUMNS NO_COLOR; do
        [[ -n ${!name:-} ]] && pass+=("$name=${!name}")
    done
    p5_in "${pass[@]}" bash -c 'set -a; . "$1"; set +a; cd "$2" && shift 2 && exec "$@"' bash "$p5_dir/env" "$cwd" "$@"
}

p5_down() {
    if [[ -f $p5_root$p5_marker ]] && [[ -e $p5_netns ]] && mountpoint -q "$p5_root/proc"; then
        p5_in timeout 60 systemctl --user stop 'rigctl-*.service' >/dev/null 2>&1 || true
        p5_in sh -c 'podman ps -aq --filter label=rigctl.managed | xargs -r podman rm -f -t 5' >/dev/null 2>&1 || true
    fi
    local pid
    if pid="$(p5_manager_pid)"; then
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    # Whatever else still runs with our root (conmon, a container, aardvark-dns, a test's leftovers): each
    # by its pid, only those whose root is this one.
    local proc
    for proc in /proc/[0-9]*; do
        [[ $(readlink "$proc/root" 2>/dev/null) == "$p5_root" ]] && kill -KILL "${proc#/proc/}" 2>/dev/null
    done
    rm -f "$p5_pidfile" "$p5_dir/env"
    if [[ -d $p5_root ]]; then
        local m
        # deepest first; never lazily: a mount that will not go must be seen
        for m in $(awk -v r="$p5_root" '$2 == r || index($2, r "/") == 1 { print $2 }' /proc/self/mounts | sort -r); do
            umount "$m" 2>/dev/null || umount -R "$m" 2>/dev/null || log "podman 5: could not unmount $m"
        done
    fi
    if [[ -e $p5_netns ]]; then umount "$p5_netns" 2>/dev/null || true; rm -f "$p5_netns"; fi
    log "podman 5 down (the root stays in $p5_root for a fast up; the cached tarball is $p5_tarball)"
}

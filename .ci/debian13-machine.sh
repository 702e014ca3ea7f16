#!/usr/bin/env bash
# Runs the project's test command as CI would on a fresh Debian 13 (trixie) machine, from this Debian 12 one:
# a debootstrapped trixie root with only what a stock server image has (python3, git, ca-certificates, curl,
# systemd, procps, iproute2), a clean clone of this checkout's HEAD inside it, and `bash .ci/run` started
# there in mount, PID and network namespaces of its own. The network reaches the outside through slirp4netns
# (user-mode NAT), so apt, PyPI and the loopback ports in there are that machine's, never this host's
# testbed's. No host directory is mounted in: what .ci/test.sh needs it must install itself, as on a real
# fresh machine. PID 1 is not systemd, as on the machines CI uses (docs/testbed.md).
#
# A developer's check that .ci/test.sh holds on Debian 13 (its native podman 5.4 path), not part of CI.
#   usage: bash .ci/debian13-machine.sh [REV]     (REV: what to clone, default HEAD; the log goes to stdout)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
rev="${1:-HEAD}"
work=${RIGCTL_DEBIAN13_DIR:-/var/tmp/rigctl-debian13}
root="$work/root"
tarball="$repo/.cache/testbed/rootfs-trixie-bare.tar"
packages=python3,git,ca-certificates,curl,systemd,systemd-sysv,dbus,procps,iproute2,less,xz-utils,gnupg
log() { printf '\n=== debian13-machine: %s\n' "$*" >&2; }

for tool in debootstrap slirp4netns unshare; do
    command -v "$tool" >/dev/null || { echo "debian13-machine: needs $tool on this host" >&2; exit 1; }
done
mirror="$(grep -rhoE '^URIs:\s*\S+/debian/?$' /etc/apt/sources.list.d/ 2>/dev/null | head -1 | awk '{print $2}')"
mirror="${mirror:-http://deb.debian.org/debian}"
if [[ ! -s $tarball ]]; then
    tmp="$(mktemp -d /var/tmp/rigctl-trixie-bare.XXXXXX)"
    log "debootstrap trixie (minbase + $packages) from $mirror"
    debootstrap --variant=minbase --include="$packages" trixie "$tmp" "$mirror" >"$work.debootstrap.log" 2>&1 \
        || { tail -20 "$work.debootstrap.log" >&2; exit 1; }
    mkdir -p "$(dirname "$tarball")"
    tar -C "$tmp" --numeric-owner -cf "$tarball.partial" . && mv -f "$tarball.partial" "$tarball"
    rm -rf --one-file-system "$tmp"
fi
if grep -q " $root" /proc/mounts; then
    echo "debian13-machine: $root still has mounts (another run?)" >&2
    exit 1
fi
rm -rf --one-file-system "$root"
mkdir -p "$root"
tar -C "$root" --numeric-owner -xpf "$tarball"
# apt's sources as a fresh trixie image has them, and this sandbox's CA (its TLS interception) as a machine
# of this kind is given it: without it no HTTPS download (PyPI) works here or there.
printf 'Types: deb\nURIs: %s\nSuites: trixie trixie-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$mirror" >"$root/etc/apt/sources.list.d/debian.sources"
rm -f "$root/etc/apt/sources.list"
cp /etc/ssl/certs/ca-certificates.crt "$root/usr/local/share/ca-certificates/host-bundle.crt"
chroot "$root" update-ca-certificates >/dev/null 2>&1 || true
echo "nameserver 10.0.2.3" >"$root/etc/resolv.conf"   # slirp4netns's DNS forwarder
echo debian13-machine >"$root/etc/hostname"
git clone -q "$repo" "$root/work/rigctl"
git -C "$root/work/rigctl" checkout -q "$rev"
log "clone of $(git -C "$repo" rev-parse --short "$rev") in $root/work/rigctl; running .ci/run"

inner=$(cat <<'EOF'
set -euo pipefail
r="$1"
for _ in $(seq 100); do ip link show tap0 >/dev/null 2>&1 && break; sleep 0.1; done
ip link show tap0 >/dev/null 2>&1 || { echo "debian13-machine: no network (slirp4netns)" >&2; exit 1; }
mount --make-rprivate /
mount --bind "$r" "$r"                     # podman remounts / inside; a plain directory refuses
mount -t proc proc "$r/proc"
mount --rbind /sys "$r/sys"; mount --make-rslave "$r/sys"
mount --rbind /dev "$r/dev"; mount --make-rslave "$r/dev"
mount -t tmpfs -o mode=0755 tmpfs "$r/run"
mount -t tmpfs -o mode=1777 tmpfs "$r/tmp"
exec chroot "$r" env -i HOME=/root USER=root LOGNAME=root LANG=C.UTF-8 TERM=dumb \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    bash -c 'cd /work/rigctl && bash .ci/run'
EOF
)
start=$(date +%s)
unshare --mount --pid --net --fork --kill-child bash -c "$inner" inner "$root" &
outer=$!
child=""
for _ in $(seq 100); do child="$(pgrep -P "$outer" | head -1 || true)"; [[ -n $child ]] && break; sleep 0.1; done
[[ -n $child ]] || { echo "debian13-machine: the namespaced shell did not start" >&2; exit 1; }
slirp4netns --configure --mtu=65520 --disable-host-loopback "$child" tap0 >"$work.slirp.log" 2>&1 &
slirp=$!
set +e
wait "$outer"
rc=$?
set -e
kill "$slirp" 2>/dev/null || true
log "exit $rc after $(( $(date +%s) - start ))s (the root stays in $root for a look; removed by the next run)"
exit "$rc"

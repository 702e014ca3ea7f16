#!/usr/bin/env bash
# Fetch the `quadlet` generator from Debian trixie's podman 5.4.2 package and install it at a stable
# path, printing that path on stdout (progress goes to stderr).
#
# Why: bookworm's podman 4.3.1 ships no quadlet, and installing trixie's podman would upgrade libc and
# systemd. The quadlet binary alone runs on bookworm. The machine's apt configuration is left alone:
# apt runs against a private state dir whose only source is a copy of the machine's debian.sources
# stanza for the main archive with the suite set to trixie.
#
# Idempotent: when the binary is already installed and runs, this prints its path and exits at once.
#   RIGCTL_QUADLET_DIR   where to install (default /usr/local/libexec/rigctl)
#   RIGCTL_QUADLET_CACHE private apt state dir (default /var/cache/rigctl/apt-trixie)
set -euo pipefail

dest_dir="${RIGCTL_QUADLET_DIR:-/usr/local/libexec/rigctl}"
dest="$dest_dir/quadlet"
private="${RIGCTL_QUADLET_CACHE:-/var/cache/rigctl/apt-trixie}"
want_version="5.4.2"

if [[ -x "$dest" ]] && "$dest" -version 2>/dev/null | grep -q "$want_version"; then
    echo "$dest"
    exit 0
fi

machine_sources=/etc/apt/sources.list.d/debian.sources
if [[ ! -r "$machine_sources" ]]; then
    echo "get-quadlet: $machine_sources not found; this script expects a Debian machine with deb822 sources" >&2
    exit 1
fi

mkdir -p "$private/sources" "$private/lists/partial" "$private/cache/archives/partial" "$private/work"
# Keep the machine's own mirror URI and keyring; take the stanza of the main archive only (the
# security archive's suite naming differs) and point it at trixie.
awk -v RS= -v ORS='\n\n' '/URIs:[^\n]*\/debian[[:space:]]*(\n|$)/ { print; exit }' "$machine_sources" \
    | sed -E 's/^Suites:.*/Suites: trixie/' > "$private/sources/trixie.sources"
if ! grep -q '^Suites: trixie' "$private/sources/trixie.sources"; then
    echo "get-quadlet: found no main-archive stanza in $machine_sources" >&2
    exit 1
fi

apt_opts=(
    -o "Dir::Etc::SourceList=/dev/null"
    -o "Dir::Etc::SourceParts=$private/sources"
    -o "Dir::State::Lists=$private/lists"
    -o "Dir::Cache=$private/cache"
    -o "Dir::State::status=/dev/null"
    -o "APT::Architecture=$(dpkg --print-architecture)"
)
echo "get-quadlet: apt-get update (private state in $private)" >&2
apt-get "${apt_opts[@]}" -qq update >&2

cd "$private/work"
rm -f podman_*.deb
echo "get-quadlet: downloading trixie's podman $want_version package" >&2
# apt-get download verifies the package against the signed index fetched above.
version="$(apt-cache "${apt_opts[@]}" madison podman | awk -v v="$want_version" '$3 ~ "^"v { print $3; exit }')"
if [[ -z "$version" ]]; then
    echo "get-quadlet: trixie offers no podman $want_version:" >&2
    apt-cache "${apt_opts[@]}" madison podman >&2 || true
    exit 1
fi
apt-get "${apt_opts[@]}" -o APT::Sandbox::User=root -qq download "podman=$version" >&2

rm -rf extract
dpkg-deb -x podman_*.deb extract
install -d "$dest_dir"
install -m 0755 extract/usr/libexec/podman/quadlet "$dest.tmp"
mv -f "$dest.tmp" "$dest"   # atomic: a concurrent reader sees the old binary or the new one
rm -rf extract podman_*.deb

"$dest" -version >&2
echo "$dest"

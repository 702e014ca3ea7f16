#!/usr/bin/env bash
# Make sure the OpenSSH server and client are installed for the fleet tests, which start their own
# sshd instances on 127.0.0.1 (tests/fleet/sshd_hosts.py). The distribution's sshd service is NOT
# started: a policy-rc.d that refuses service starts is put in place for the install when none exists.
# Idempotent; prints the sshd path.
set -euo pipefail
if [[ -x /usr/sbin/sshd ]] && command -v ssh >/dev/null && command -v ssh-keygen >/dev/null; then
    echo /usr/sbin/sshd
    exit 0
fi
added_policy=0
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod 0755 /usr/sbin/policy-rc.d
    added_policy=1
fi
trap '[[ $added_policy == 1 ]] && rm -f /usr/sbin/policy-rc.d' EXIT
DEBIAN_FRONTEND=noninteractive apt-get -qq update >&2
DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssh-server openssh-client >&2
mkdir -p /run/sshd
echo /usr/sbin/sshd

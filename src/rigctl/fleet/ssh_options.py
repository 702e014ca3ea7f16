"""Which ssh options an inventory may set: an allow-list.

ssh runs as the operator (often root), so an option is local power: a path it writes (UserKnownHostsFile
with accept-new appends a line to any file: to authorized_keys, a login), a socket it binds or unlinks
(LocalForward with StreamLocalBindUnlink deletes any file), an agent it talks to (IdentityAgent with
AddKeysToAgent hands the private key to whoever owns the socket), a program it runs (ProxyCommand). An
inventory may set only the connection settings below, each with a bounded value; anything else needs the
operator's ``--allow-ssh-options`` (the file cannot allow it for itself). rigctl's own options (``OWN``)
are never the inventory's: ``OpenSsh.argv`` puts them first, and ssh keeps the first value it is given.

Known hosts: the inventory may ask for ``StrictHostKeyChecking`` yes or accept-new only, and never names
the file ssh reads and writes: that stays the operator's (their ssh_config, else ~/.ssh/known_hosts).
``no``/``off`` (Ansible's host_key_checking=false) lets a changed host key through: opt-in.

Names are compared as ssh compares them, in any case.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

from rigctl.invocation import expand_user, path_refusal
from rigctl.util.text import printable

ALLOW_SSH_OPTIONS = "--allow-ssh-options"
OLD_ALLOW_SSH_OPTIONS = "--allow-ssh-commands"  # its first name, when it covered only programs; still taken

# rigctl's own: the connection sharing, the batch mode that never prompts, what ssh logs on stderr (read
# as the host's error). Ansible's usual `-o ControlMaster=auto -o ControlPersist=60s` is dropped, with a note.
OWN = {name.lower(): name for name in ("BatchMode", "ControlMaster", "ControlPath", "ControlPersist", "LogLevel")}

_NUMBER = r"[0-9]{1,6}"
_YES_NO = r"(?i:yes|no|true|false)"
# algorithm lists: names, commas, and ssh's +/-/^ prefix and * ? ! patterns
_ALGORITHMS = r"[+^-]?[A-Za-z0-9@._*?!-]+(?:,[A-Za-z0-9@._*?!-]+)*"
_HOST = r"[A-Za-z0-9_.:\[\]-]+"
_JUMP_HOP = r"(?:ssh://)?(?:[A-Za-z0-9_.+-]+@)?[A-Za-z0-9_.:\[\]-]+"

# Connection settings: how to reach and talk to the host, nothing that touches this machine. No value may
# hold '%', '$' or '~' (ssh expands tokens and variables in some) or a space (a second argument).
ALLOWED: dict[str, str] = {name.lower(): pattern for name, pattern in {
    "User": r"[a-z_][a-z0-9_.-]*",
    "Port": _NUMBER,
    "HostName": _HOST,
    "ProxyJump": rf"(?i:none)|{_JUMP_HOP}(?:,{_JUMP_HOP})*",
    "ConnectTimeout": _NUMBER,
    "ConnectionAttempts": _NUMBER,
    "ServerAliveInterval": _NUMBER,
    "ServerAliveCountMax": _NUMBER,
    "TCPKeepAlive": _YES_NO,
    "Compression": _YES_NO,
    "Ciphers": _ALGORITHMS,
    "KexAlgorithms": _ALGORITHMS,
    "MACs": _ALGORITHMS,
    "HostKeyAlgorithms": _ALGORITHMS,
    "PubkeyAcceptedAlgorithms": _ALGORITHMS,
    "PubkeyAcceptedKeyTypes": _ALGORITHMS,  # the old name of PubkeyAcceptedAlgorithms
    "CASignatureAlgorithms": _ALGORITHMS,
    "AddressFamily": r"(?i:any|inet|inet6)",
    "StrictHostKeyChecking": r"(?i:yes|true|accept-new)",
    "IdentitiesOnly": _YES_NO,
    "PreferredAuthentications": r"[a-z-]+(?:,[a-z-]+)*",
    "PubkeyAuthentication": r"(?i:yes|no|true|false|unbound|host-bound)",
    "PasswordAuthentication": _YES_NO,
    "KbdInteractiveAuthentication": _YES_NO,
    "NumberOfPasswordPrompts": _NUMBER,
    "IPQoS": r"[A-Za-z0-9]+",
    "RekeyLimit": r"[0-9]+[KMG]?",
    "RequiredRSASize": _NUMBER,
    "FingerprintHash": r"(?i:md5|sha256)",
    "IdentityFile": r"[^\s%$]+",  # and the path must pass the trust rule (identity_problem)
}.items()}

# ssh's flags in Ansible's ssh arguments, as the options they set: then the allow-list judges them.
# Each with an argument names its option; each without one gives (option, value).
FLAG_OPTION = {"-J": "ProxyJump", "-p": "Port", "-l": "User", "-i": "IdentityFile", "-c": "Ciphers",
               "-m": "MACs", "-L": "LocalForward", "-R": "RemoteForward", "-D": "DynamicForward",
               "-I": "PKCS11Provider", "-b": "BindAddress", "-B": "BindInterface", "-e": "EscapeChar",
               "-S": "ControlPath", "-w": "Tunnel", "-P": "Tag"}
FLAG_VALUE = {"-C": ("Compression", "yes"), "-4": ("AddressFamily", "inet"), "-6": ("AddressFamily", "inet6"),
              "-A": ("ForwardAgent", "yes"), "-a": ("ForwardAgent", "no"), "-X": ("ForwardX11", "yes"),
              "-x": ("ForwardX11", "no"), "-Y": ("ForwardX11Trusted", "yes"),
              "-K": ("GSSAPIDelegateCredentials", "yes"), "-k": ("GSSAPIDelegateCredentials", "no"),
              "-g": ("GatewayPorts", "yes"), "-q": ("LogLevel", "QUIET"),
              "-v": ("LogLevel", "VERBOSE"), "-M": ("ControlMaster", "yes"), "-T": ("RequestTTY", "no"),
              "-t": ("RequestTTY", "yes"), "-N": ("SessionType", "none"), "-s": ("SessionType", "subsystem"),
              "-f": ("ForkAfterAuthentication", "yes"), "-n": ("StdinNull", "yes")}
# flags no option stands for: another configuration file, a log file written here, a forward of stdio,
# a control command, a query; rigctl builds its own command line and will not pass them.
FLAG_REFUSED = {"-F": "reads another configuration file", "-E": "writes a log file on this machine",
                "-W": "forwards stdin and stdout", "-O": "sends a control command", "-G": "only prints a configuration",
                "-Q": "only queries", "-V": "only prints a version", "-y": "sends logs to syslog"}

_OPTION = re.compile(r"^\s*([A-Za-z][A-Za-z0-9]*)\s*(?:=\s*|\s+)(.*?)\s*$", re.S)


def parse_ssh_args(words: list[str]) -> tuple[list[tuple[str, str]], str | None]:
    """ssh's arguments (Ansible's ansible_ssh_*args, split) as (option, value) pairs, every flag as the
    option it sets (``-L 80:x:80`` is LocalForward, ``-C4`` two of them); a flag no option stands for,
    or a word that is no flag, is a problem."""
    options: list[tuple[str, str]] = []
    i = 0
    while i < len(words):
        word, i = words[i], i + 1
        if not word.startswith("-") or word in ("-", "--"):
            return [], f"{word!r}: rigctl passes only ssh's options here, no destination or command"
        at = 1
        while at < len(word):
            flag = "-" + word[at]
            at += 1
            if flag in FLAG_VALUE:
                options.append(FLAG_VALUE[flag])
                continue
            if flag in FLAG_REFUSED:
                return [], f"{flag} {FLAG_REFUSED[flag]}: rigctl does not pass it"
            if flag != "-o" and flag not in FLAG_OPTION:
                return [], f"{word!r}: {flag} is not an ssh option rigctl knows"
            if at < len(word):
                arg = word[at:]
            elif i < len(words):
                arg, i = words[i], i + 1
            else:
                return [], f"{flag} without its value"
            if flag == "-o":
                match = _OPTION.match(arg)
                if not match:
                    return [], f"-o {arg!r} is not Key=Value"
                options.append((match.group(1), match.group(2)))
            else:
                options.append((FLAG_OPTION[flag], arg))
            break
    return options, None


def identity_problem(path: str) -> str | None:
    """Why ssh must not take ``path`` as a private key: the key, or a directory above it, is owned or
    writable by someone other than root and this user, who would then choose the key ssh logs in with
    (``invocation.path_refusal``, the trust rule). None when it may."""
    if any(c in path for c in "%$"):
        return "ssh would expand %tokens or ${variables} in it"
    return path_refusal(os.path.abspath(expand_user(path)))


def option_problem(key: str, value: str) -> str | None:
    """Why an inventory may not set ssh option ``key`` to ``value`` by itself, or None."""
    name = key.lower()
    if name in OWN:
        return f"rigctl sets {OWN[name]} itself"
    pattern = ALLOWED.get(name)
    if pattern is None:
        return "not a connection setting an inventory may choose (it may act on this machine)"
    if not re.fullmatch(pattern, value):
        return "not a value rigctl lets an inventory give it"
    if name == "identityfile":
        return identity_problem(value)
    return None


def jump_hosts(value: str) -> list[str]:
    """The hosts of a ProxyJump value's hops (``[ssh://][user@]host[:port]``, comma-separated)."""
    hosts = []
    for hop in value.split(","):
        host = hop.removeprefix("ssh://").rpartition("@")[2]
        if host.startswith("["):
            host = host[1:].partition("]")[0]
        elif host.count(":") == 1:
            host = host.partition(":")[0]
        hosts.append(host.lower())
    return hosts


def jump_problem(value: str, known: frozenset[str]) -> str | None:
    """Why a ProxyJump may not go where ``value`` says: a hop that is no host of the inventory (its names and
    ssh destinations, ``known``) would send root's connection, and the keys it offers, to a host nobody listed."""
    if value.lower() == "none":
        return None
    strangers = [h for h in jump_hosts(value) if h not in known]
    return f"jumps through {', '.join(strangers)}, not a host of this inventory" if strangers else None


def host_option_problems(where: str, name: str, options: Mapping[str, str],
                         identity_file: str | None, known: frozenset[str] | None = None) -> list[str]:
    """One line per option of host ``name`` that the inventory may not set by itself (and for its
    ``identity_file``), naming the opt-in. ``known``: the inventory's host names and ssh destinations, where
    ProxyJump hops must lead (None: not judged here)."""
    said = [(f"ssh option {printable(f'{key}={value}', 120)}", why) for key, value in options.items()
            if (why := option_problem(key, value)) is not None
            or (known is not None and key.lower() == "proxyjump" and (why := jump_problem(value, known)) is not None)]
    if identity_file is not None and (why := identity_problem(identity_file)) is not None:
        said.append((f"identity file {printable(identity_file, 120)}", why))
    return [f"{where}: host {name}: {what}: {why}; refused without {ALLOW_SSH_OPTIONS}" for what, why in said]


def without_own(options: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(k, v) for k, v in options if k.lower() not in OWN]

"""A published port, in one place: how a ``PublishPort=`` (``podman run --publish``) value is read and spelt, and
the URL a client on this host uses to reach what it publishes.

Every home of the endpoint comes here: the recipe's ``base_url``, the unit's ``PublishPort=`` (render), the
endpoint `status` reads back from a unit, doctor's exposure rule and the dry run. The rules:

- podman's syntax is ``[[ip:][hostPort]:]containerPort[/proto]``, an IPv6 address in brackets
  (``[::1]:8000:8000``); a missing host port is one podman picks.
- a server published on every address (``0.0.0.0``, ``::``, or no address at all) is reached over the loopback
  of that family (``127.0.0.1``, ``[::1]``), never at the unspecified address, which is no destination;
  an IPv6 address is bracketed in a URL.
- ``endpoint`` in rigctl's JSON is that base URL (``http://127.0.0.1:8000``: up, status, swap, the deployment
  record); the OpenAI base URL a client library takes adds ``/v1`` (``openai_url``).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

LOOPBACK = {4: "127.0.0.1", 6: "::1"}
OPENAI_PATH = "/v1"
MODELS_PATH = f"{OPENAI_PATH}/models"  # the served models: every OpenAI-compatible engine answers it


@dataclass(frozen=True)
class Published:
    """One ``PublishPort=`` value, taken apart."""

    address: str | None  # the host address without brackets; None: none given (podman: every address)
    host_port: str  # "" when podman picks one; may be a range ("8000-8003")
    container_port: str
    proto: str = ""  # "/tcp", "/udp", or ""

    @property
    def shown_address(self) -> str | None:
        """The address as podman's syntax writes it (an IPv6 one bracketed)."""
        return None if self.address is None else _bracketed(self.address)

    @property
    def spec(self) -> str:
        return spell_publish(self.address, self.host_port, self.container_port, self.proto)


def _bracketed(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def parse_publish(spec: str) -> Published:
    """``[[ip:][hostPort]:]containerPort[/proto]`` taken apart (nothing is checked: see ``endpoint_of``)."""
    body, slash, proto = spec.partition("/")
    suffix = slash + proto
    if body.startswith("["):
        address, _, rest = body[1:].partition("]")
        host_port, _, container_port = rest.removeprefix(":").rpartition(":")
        return Published(address, host_port, container_port, suffix)
    parts = body.split(":")
    if len(parts) == 1:
        return Published(None, "", parts[0], suffix)
    if len(parts) == 2:
        return Published(None, parts[0], parts[1], suffix)
    return Published(":".join(parts[:-2]), parts[-2], parts[-1], suffix)


def spell_publish(address: str | None, host_port: int | str, container_port: int | str, proto: str = "") -> str:
    """A ``PublishPort=`` value: ``127.0.0.1:8000:8000``, ``[::1]:8000:8000``, ``8000:8000``, ``8000``."""
    if not address and host_port == "":
        return f"{container_port}{proto}"  # the container port alone: podman picks the host's
    head = f"{_bracketed(address)}:" if address else ""
    return f"{head}{host_port}:{container_port}{proto}"


def _ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return None
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return mapped or ip


def every_address(address: str | None) -> bool:
    """Whether a bind or publish address means every address: none, ``*``, or an unspecified IP however it
    is spelt (``0.0.0.0``, ``::``, ``0:0:0:0:0:0:0:0``, ``[::]``)."""
    if not address or address.strip("[]") in ("", "*"):
        return True
    ip = _ip(address)
    return ip is not None and ip.is_unspecified


def loopback_only(address: str) -> bool:
    """Whether an address is reached from this host alone: ``localhost`` or a loopback IP however it is
    spelt (``127.0.0.2``, ``::1``, ``[0:0:0:0:0:0:0:1]``)."""
    if address.strip("[]").lower() == "localhost":
        return True
    ip = _ip(address)
    return ip is not None and ip.is_loopback


def same_address(a: str, b: str) -> bool:
    """Whether two addresses are the same one, however each is spelt."""
    ip_a, ip_b = _ip(a), _ip(b)
    return ip_a == ip_b if ip_a is not None and ip_b is not None else a.strip("[]") == b.strip("[]")


def client_url(address: str | None, port: int | str) -> str:
    """``http://HOST:PORT`` for a server published on ``address`` (None or "": every address): an unspecified
    address is reached over the loopback of its family, an IPv6 address is bracketed, a name is kept."""
    host = address.strip("[]") if address else LOOPBACK[4]
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return f"http://{host}:{port}"  # a host name
    if ip.is_unspecified:
        ip = ipaddress.ip_address(LOOPBACK[ip.version])
    return f"http://[{ip}]:{port}" if ip.version == 6 else f"http://{ip}:{port}"


def endpoint_of(spec: str) -> str | None:
    """The URL a client here uses for what ``spec`` (a PublishPort= value) publishes; None when it names no
    single host port (podman picks it, or a range) or its address is not an IP address (podman takes no
    other)."""
    published = parse_publish(spec)
    port = published.host_port
    if not (port.isascii() and port.isdigit() and len(port) <= 5 and 0 < int(port) < 65536):
        return None
    if published.proto not in ("", "/tcp"):
        return None  # HTTP is TCP: a UDP port is no endpoint
    if published.address:
        try:
            ipaddress.ip_address(published.address)
        except ValueError:
            return None
    return client_url(published.address, int(published.host_port))


def openai_url(base_url: str) -> str:
    """The OpenAI base URL a client library takes (``http://127.0.0.1:8000/v1``) for rigctl's base URL."""
    return base_url.rstrip("/") + OPENAI_PATH

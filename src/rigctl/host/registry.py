"""The recipe's image config from its registry, for an image not pulled here: what CUDA and NCCL it declares
(``CUDA_VERSION``, ``NCCL_VERSION`` in its Env), so preflight can judge them before a pull of tens of GB.

The OCI distribution API, read-only and anonymous: the manifest the recipe pins (an index or a manifest), the
index entry of this host's platform, then the config blob. The registry is treated as hostile: only https (plain
http only for a loopback registry, and only where the caller asks: tests), a few redirects, a deadline for the
whole exchange, a size cap on every body, and each manifest and blob checked against the sha256 digest that named
it before a byte of it is believed. Whatever goes wrong is said in the result's ``error``, never raised.

A config is cached by digest (it cannot change): in rigctl's cache directory, read and written under the trust
rule (``util.safefs``). ``RIGCTL_OFFLINE=1`` (or ``offline=True``) asks no registry; the cache still answers.
No credentials are read: a private image's config is read once it is pulled (``podman image inspect``).
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import os
import platform
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from rigctl.errors import InvalidInputError
from rigctl.host.facts import IMAGE_CUDA_KEYS, IMAGE_ENV_MAX, IMAGE_NCCL_KEYS, NAME_MAX, PATH_MAX, RegistryImage
from rigctl.invocation import current
from rigctl.recipe.reference import IMAGE_RE
from rigctl.util.jsonfile import load_cache_map, parse_json, save_cache_map

if TYPE_CHECKING:
    import httpx

OFFLINE_ENV = "RIGCTL_OFFLINE"
TIMEOUT_S = 5.0  # the whole exchange: token, manifests, config; preflight waits for no more
MAX_REDIRECTS = 3  # a blob is often one redirect away (a CDN); more is a loop
MANIFEST_LIMIT = 4 << 20  # the OCI spec's own bound for a manifest a registry must accept
CONFIG_LIMIT = 8 << 20  # an image config with a long history is tens of KiB
TOKEN_LIMIT = 64 << 10
TOKEN_MAX = 16 << 10  # characters of a bearer token
CACHE_ENTRIES = 256
MANIFEST_DEPTH = 2  # an index, then the manifest it lists; an index of indexes is refused

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEXES = (OCI_INDEX, DOCKER_LIST)
MANIFESTS = (OCI_MANIFEST, DOCKER_MANIFEST)
ACCEPT = ", ".join((OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST))
DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")

DOCKER_HUB = "registry-1.docker.io"
_HUB_NAMES = ("docker.io", "index.docker.io", DOCKER_HUB)
_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64", "ppc64le": "ppc64le",
         "s390x": "s390x"}
ANONYMOUS = ("rigctl reads registries anonymously: a private image's config is read once it is pulled, or the "
             "recipe's image_declares says it")


class Refused(Exception):
    """Why the registry's answer is not believed (or never came): the result's ``error``."""


def offline_by_env() -> bool:
    """Whether ``RIGCTL_OFFLINE`` asks that no registry be contacted (any value but empty and 0)."""
    return os.environ.get(OFFLINE_ENV, "") not in ("", "0")


def host_arch() -> str:
    """This host's architecture as OCI platforms name it (amd64, arm64)."""
    machine = platform.machine().lower()
    return _ARCH.get(machine, machine)


def locate(name: str) -> tuple[str, str]:
    """(registry host[:port], repository) of an image name, as podman and docker read it: a first component with
    a dot, a colon or ``localhost`` is a registry; anything else is Docker Hub, whose official images live under
    ``library/``."""
    first, sep, rest = name.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        host, repo = first.lower(), rest
    else:
        host, repo = "docker.io", name
    if host in _HUB_NAMES:
        host = DOCKER_HUB
        if "/" not in repo:
            repo = f"library/{repo}"
    return host, repo


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# --- the cache -----------------------------------------------------------------------------------------------


def cache_path() -> Path:
    return current().cache_home / "rigctl" / "image-configs.json"


class ConfigCache:
    """Verified configs by (pinned digest, architecture): a JSON map read bounded and only when it passes the
    trust rule; a damaged file or entry counts as absent."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or cache_path()
        self._data: dict[str, dict[str, Any]] = load_cache_map(self.path, "configs")

    @staticmethod
    def key(digest: str, arch: str) -> str:
        return f"{digest} {arch}"

    def get(self, image: str, digest: str, arch: str) -> RegistryImage | None:
        entry = self._data.get(self.key(digest, arch))
        if entry is None:
            return None
        try:
            return RegistryImage.model_validate({**entry, "image": image, "digest": digest, "cached": True})
        except ValidationError:
            return None  # a damaged entry is asked again

    def put(self, found: RegistryImage, arch: str) -> None:
        """Remember a config that was read and verified (never a failure: the next run may get through)."""
        if found.error is not None or found.env is None:
            return
        entry = found.model_dump(mode="json", include={"registry", "platform", "config_digest", "env"})
        key = self.key(found.digest, arch)
        self._data.pop(key, None)
        self._data[key] = entry
        while len(self._data) > CACHE_ENTRIES:
            del self._data[next(iter(self._data))]
        save_cache_map(self.path, "configs", self._data)  # unwritable: a request next time


# --- the exchange --------------------------------------------------------------------------------------------


@dataclass
class _Session:
    """One image's exchange with its registry: one client, one deadline, the bearer token once granted."""

    client: httpx.Client
    origin: tuple[str, str, int | None]  # the registry's scheme, host, port: the only place the token goes
    deadline: float
    plain_http_loopback: bool
    repo: str
    token: str | None = None
    anonymous_refused: bool = False

    def remaining(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise Refused("the registry took longer than the deadline")
        return left

    def allowed(self, url: httpx.URL) -> None:
        if url.scheme == "https" or (url.scheme == "http" and self.plain_http_loopback and _loopback(url.host)):
            return
        raise Refused(f"refused to follow {str(url)[:200]}: only https")

    def get(self, url: str, accept: str, limit: int, *, auth: bool = True) -> tuple[bytes, str]:
        """The body (at most ``limit`` bytes) and content type of a GET, redirects followed a few times and the
        token flow run once on a 401 from the registry itself."""
        import httpx  # noqa: PLC0415 - loaded only when a registry is asked

        target = httpx.URL(url)
        asked_token = False
        redirects = 0
        while True:  # ends: at most MAX_REDIRECTS redirects and one token asked
            self.allowed(target)
            headers = {"Accept": accept, "Accept-Encoding": "identity"}
            own = (target.scheme, target.host, target.port) == self.origin
            if auth and own and self.token is not None:
                headers["Authorization"] = f"Bearer {self.token}"  # never to a CDN a redirect names
            with self._stream(target, headers) as response:
                status = response.status_code
                if status in (301, 302, 303, 307, 308):
                    location = response.headers.get("location")
                    redirects += 1
                    if redirects > MAX_REDIRECTS:
                        raise Refused(f"more than {MAX_REDIRECTS} redirects")
                    if not location:
                        raise Refused(f"HTTP {status} without a Location")
                    target = target.join(location)
                    continue
                if status == 401 and auth and own and not asked_token:
                    challenge = response.headers.get("www-authenticate", "")
                    asked_token = True
                    self.token = self._token(challenge)
                    continue
                if status in (401, 403):
                    self.anonymous_refused = True
                    raise Refused(f"HTTP {status} for {target.path[:200]}: {ANONYMOUS}")
                if status != 200:
                    raise Refused(f"HTTP {status} for {target.path[:200]}")
                return self._read(response, limit), response.headers.get("content-type", "").split(";")[0].strip()

    @contextlib.contextmanager
    def _stream(self, url: httpx.URL, headers: dict[str, str]) -> Iterator[httpx.Response]:
        import httpx  # noqa: PLC0415

        left = self.remaining()
        with self.client.stream("GET", url, headers=headers, timeout=httpx.Timeout(left)) as response:
            yield response

    def _read(self, response: httpx.Response, limit: int) -> bytes:
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise Refused(f"a {encoding}-encoded body, though identity was asked")  # no decompression bombs
        declared = response.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise Refused(f"a body of {int(declared)} bytes, more than {limit}")
        got = bytearray()
        for chunk in response.iter_raw():
            got += chunk
            if len(got) > limit:
                raise Refused(f"a body of more than {limit} bytes")
            self.remaining()  # a body dripped slowly is bounded by the deadline, not by each read's timeout
        return bytes(got)

    def _token(self, challenge: str) -> str:
        """A pull token from the realm the registry's ``WWW-Authenticate: Bearer`` names, asked anonymously."""
        import httpx  # noqa: PLC0415

        scheme, _, params = challenge.strip().partition(" ")
        if scheme.lower() != "bearer":
            self.anonymous_refused = True
            raise Refused(f"the registry asks for {scheme[:40] or 'credentials'} authentication: {ANONYMOUS}")
        fields = {k.lower(): v for k, v in re.findall(r'(\w+)="([^"]{0,2048})"', params)}
        realm = fields.get("realm")
        if not realm:
            raise Refused("a Bearer challenge without a realm")
        query = {"service": fields.get("service", ""), "scope": fields.get("scope") or f"repository:{self.repo}:pull"}
        try:
            url = httpx.URL(realm).copy_merge_params({k: v for k, v in query.items() if v})
        except (httpx.InvalidURL, TypeError, ValueError) as exc:
            raise Refused(f"the token realm is no URL ({exc})") from None
        body, _ = self.get(str(url), "application/json", TOKEN_LIMIT, auth=False)
        data = _json(body, "the token")
        token = data.get("token") or data.get("access_token")
        if not isinstance(token, str) or not token or len(token) > TOKEN_MAX or not token.isascii() \
                or not token.isprintable():
            raise Refused("the token service answered no usable token")
        return token


def _json(body: bytes, what: str) -> dict[str, Any]:
    try:
        value = parse_json(body, what)
    except InvalidInputError as exc:
        raise Refused(exc.problems[0][:300]) from None
    if not isinstance(value, dict):
        raise Refused(f"{what} is not a JSON object")
    return value


def _verified(body: bytes, digest: str, what: str) -> None:
    got = "sha256:" + hashlib.sha256(body).hexdigest()
    if got != digest:
        raise Refused(f"{what} does not match its digest: asked {digest}, got {got}")


def _descriptor(value: object, what: str, limit: int) -> str:
    """The digest of an OCI descriptor, refused unless sha256 (the only one checked here) and within ``limit``."""
    if not isinstance(value, dict):
        raise Refused(f"{what} is not a descriptor")
    digest, size = value.get("digest"), value.get("size")
    if not isinstance(digest, str) or not DIGEST_RE.fullmatch(digest):
        raise Refused(f"{what}'s digest {str(digest)[:80]!r} is not a sha256 digest")
    if isinstance(size, int) and not isinstance(size, bool) and not 0 <= size <= limit:
        raise Refused(f"{what} is {size} bytes, more than {limit}")
    return digest


def _pick(index: dict[str, Any], arch: str) -> tuple[str, str]:
    """The digest and platform of the index's manifest for linux/``arch``."""
    entries = index.get("manifests")
    if not isinstance(entries, list):
        raise Refused("the index lists no manifests")
    seen: list[str] = []
    for entry in entries[:1024]:
        plat = entry.get("platform") if isinstance(entry, dict) else None
        if not isinstance(plat, dict):
            continue
        os_name, cpu = plat.get("os"), plat.get("architecture")
        if isinstance(os_name, str) and isinstance(cpu, str):
            seen.append(f"{os_name[:20]}/{cpu[:20]}")
        if os_name == "linux" and cpu == arch:
            return _descriptor(entry, f"the index's linux/{arch} entry", MANIFEST_LIMIT), f"linux/{arch}"
    raise Refused(f"the index has no linux/{arch} manifest (it has {', '.join(seen[:8]) or 'no platform'})")


def _config_env(config: dict[str, Any]) -> list[str]:
    """The Env entries of an image config that declare CUDA or NCCL (the rest is not kept)."""
    inner = config.get("config")
    env = inner.get("Env") if isinstance(inner, dict) else None
    if env is None:
        return []
    if not isinstance(env, list):
        raise Refused("the config's Env is not a list")
    keys = (*IMAGE_CUDA_KEYS, *IMAGE_NCCL_KEYS)
    return [e for e in env[:4096] if isinstance(e, str) and e.split("=", 1)[0] in keys][:IMAGE_ENV_MAX]


def _exchange(session: _Session, base: str, digest: str, arch: str) -> dict[str, Any]:
    """registry, platform, config_digest and env of the pinned image."""
    wanted, plat = digest, None
    for _ in range(MANIFEST_DEPTH):
        body, ctype = session.get(f"{base}/v2/{session.repo}/manifests/{wanted}", ACCEPT, MANIFEST_LIMIT)
        _verified(body, wanted, "the manifest" if wanted == digest else f"the {plat} manifest")
        doc = _json(body, "the manifest")
        media = doc.get("mediaType") if isinstance(doc.get("mediaType"), str) else ctype
        if media in INDEXES or (media not in MANIFESTS and "manifests" in doc):
            if plat is not None:
                raise Refused("an index lists another index")
            wanted, plat = _pick(doc, arch)
            continue
        if media not in MANIFESTS and "config" not in doc:
            raise Refused(f"the manifest is of type {str(media)[:80]!r}, not an OCI or Docker v2 manifest")
        config_digest = _descriptor(doc.get("config"), "the manifest's config", CONFIG_LIMIT)
        blob, _ = session.get(f"{base}/v2/{session.repo}/blobs/{config_digest}",
                              "application/vnd.oci.image.config.v1+json, application/json, */*", CONFIG_LIMIT)
        _verified(blob, config_digest, "the config blob")
        config = _json(blob, "the config")
        return {"platform": plat, "config_digest": config_digest, "env": _config_env(config)}
    raise Refused("an index lists another index")


def image_config(image: str, *, arch: str | None = None, offline: bool | None = None, timeout_s: float = TIMEOUT_S,
                 cache: ConfigCache | None = None, plain_http_loopback: bool = False,
                 transport: httpx.BaseTransport | None = None) -> RegistryImage:
    """The pinned ``image``'s config as its registry serves it (or as rigctl's cache remembers it). Never
    raises for what the registry does: the result's ``error`` says it. ``plain_http_loopback``: a registry on
    127.0.0.1/::1/localhost may be spoken to over plain http (the tests' registry); nothing else may.
    ``offline`` None: ``RIGCTL_OFFLINE``."""
    match = IMAGE_RE.fullmatch(image) if len(image) <= PATH_MAX else None
    if match is None:
        return RegistryImage(image=image[:PATH_MAX], digest="sha256:" + "0" * 64, error="not a pinned reference")
    digest, arch = match.group("digest"), (arch or host_arch())[:64]
    host, repo = locate(match.group("name"))
    if len(host) > NAME_MAX:
        return RegistryImage(image=image, digest=digest, error="the registry's name is too long")
    cache = cache if cache is not None else ConfigCache()
    hit = cache.get(image, digest, arch)
    if hit is not None:
        return hit
    if offline if offline is not None else offline_by_env():
        return RegistryImage(image=image, digest=digest, registry=host,
                             error=f"offline ({OFFLINE_ENV}): the registry was not asked")
    found = _ask(image, digest, host=host, repo=repo, arch=arch, timeout_s=timeout_s,
                 plain_http_loopback=plain_http_loopback, transport=transport)
    cache.put(found, arch)
    return found


def _ask(image: str, digest: str, *, host: str, repo: str, arch: str, timeout_s: float, plain_http_loopback: bool,
         transport: httpx.BaseTransport | None) -> RegistryImage:
    import httpx  # noqa: PLC0415 - its import is paid only when a registry is asked

    scheme = "http" if plain_http_loopback and _loopback(host.rsplit(":", 1)[0]) else "https"
    base = f"{scheme}://{host}"
    failed: str
    try:
        origin = httpx.URL(base)
        # trust_env off: no proxy, netrc or CA bundle from an environment root may have inherited from a user
        with httpx.Client(follow_redirects=False, trust_env=False, transport=transport,
                          headers={"User-Agent": "rigctl"}) as client:
            session = _Session(client, (origin.scheme, origin.host, origin.port), time.monotonic() + timeout_s,
                               plain_http_loopback, repo)
            got = _exchange(session, base, digest, arch)
        return RegistryImage(image=image, digest=digest, registry=host, **got)
    except Refused as exc:
        failed = str(exc)
    except httpx.TimeoutException:
        failed = f"no answer within {timeout_s:g} s"
    except httpx.HTTPError as exc:
        failed = f"{type(exc).__name__}: {str(exc)[:300]}"
    except (httpx.InvalidURL, ValueError, UnicodeError) as exc:  # a Location or realm no URL parser accepts
        failed = f"{type(exc).__name__}: {str(exc)[:300]}"
    return RegistryImage(image=image, digest=digest, registry=host, error=f"{host}: {failed}")

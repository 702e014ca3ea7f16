"""A registry on 127.0.0.1 for tests of ``host.registry``: the OCI distribution API's real shapes (a 401 with a
Bearer challenge, then a token; an OCI index of two platforms; manifests; config blobs behind a redirect), with
switches for the ways a hostile registry misbehaves. Never a remote registry."""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from rigctl.host.registry import MANIFEST_LIMIT, OCI_INDEX, OCI_MANIFEST

REPO = "vllm/vllm-openai"
TOKEN = "good-token"
ENV = ["PATH=/usr/local/nvidia/bin:/usr/bin", "NVIDIA_VISIBLE_DEVICES=all", "CUDA_VERSION=13.1.0",
       "NV_CUDA_CUDART_VERSION=13.1.80-1", "NCCL_VERSION=2.26.2-1"]


def digest(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


def config_blob(env: list[str], arch: str) -> bytes:
    return json.dumps({"architecture": arch, "os": "linux", "config": {"Env": env, "WorkingDir": "/"},
                       "rootfs": {"type": "layers", "diff_ids": []}}).encode()


def manifest(config: bytes) -> bytes:
    return json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": {
        "mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest(config), "size": len(config)},
        "layers": []}).encode()


@dataclass
class Registry:
    """What the loopback registry serves, and how it misbehaves (set by each test)."""

    port: int = 0
    blobs: dict[str, bytes] = field(default_factory=dict)  # by digest: manifests and configs alike
    index: str = ""  # the digest a recipe pins
    requests: list[str] = field(default_factory=list)
    tamper: bytes | None = None  # served in place of the config blob
    huge: bool = False  # the manifest streams on without end (no Content-Length)
    stall_s: float = 0.0  # before answering a manifest
    redirect_loop: bool = False
    redirect_to: str | None = None  # where a blob request is sent

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def ref(self, pinned: str | None = None) -> str:
        return f"{self.host}/{REPO}:v0.11.0@{pinned or self.index}"

    def add(self, body: bytes) -> str:
        self.blobs[digest(body)] = body
        return digest(body)


def build(reg: Registry, amd64_env: list[str] = ENV, config: bytes | None = None) -> None:
    """An index of two platforms: arm64 (CUDA 12.8, listed first) and amd64."""
    arm_cfg = config_blob(["CUDA_VERSION=12.8.1", "NCCL_VERSION=2.27.3-1"], "arm64")
    amd_cfg = config if config is not None else config_blob(amd64_env, "amd64")
    reg.add(arm_cfg)
    reg.add(amd_cfg)
    arm, amd = reg.add(manifest(arm_cfg)), reg.add(manifest(amd_cfg))
    entries = [{"mediaType": OCI_MANIFEST, "digest": d, "size": len(reg.blobs[d]),
                "platform": {"architecture": a, "os": "linux"}} for d, a in ((arm, "arm64"), (amd, "amd64"))]
    reg.index = reg.add(json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}).encode())


def handler_for(reg: Registry) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for k, v in {"Content-Length": str(len(body)), **(headers or {})}.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            reg.requests.append(self.path)
            if self.path.startswith("/token?"):
                assert "service=test-registry" in self.path and f"repository%3A{REPO.replace('/', '%2F')}" in self.path
                return self.send(200, json.dumps({"token": TOKEN, "expires_in": 300}).encode())
            if self.path.startswith("/cdn/"):  # another path the blob redirect leads to: no token needed
                return self.send(200, reg.tamper or reg.blobs[self.path.removeprefix("/cdn/")])
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                return self.send(401, b'{"errors":[{"code":"UNAUTHORIZED"}]}', {"WWW-Authenticate": (
                    f'Bearer realm="http://{reg.host}/token",service="test-registry",'
                    f'scope="repository:{REPO}:pull"'), "Content-Type": "application/json"})
            kind, _, wanted = self.path.removeprefix(f"/v2/{REPO}/").partition("/")
            if kind == "manifests":
                time.sleep(reg.stall_s)
                if reg.huge:
                    self.send_response(200)
                    self.send_header("Content-Type", OCI_INDEX)
                    self.end_headers()
                    chunk = b" " * 65536
                    for _ in range(MANIFEST_LIMIT // len(chunk) + 8):
                        self.wfile.write(chunk)
                    return None
                body = reg.blobs.get(wanted)
                if body is None:
                    return self.send(404)
                media = json.loads(body).get("mediaType", OCI_MANIFEST)
                return self.send(200, body, {"Content-Type": media, "Docker-Content-Digest": wanted})
            if kind == "blobs":
                if reg.redirect_loop:
                    return self.send(307, headers={"Location": self.path})
                return self.send(307, headers={"Location": reg.redirect_to or f"/cdn/{wanted}"})
            return self.send(404)

    return Handler


@contextlib.contextmanager
def serving() -> Iterator[Registry]:
    """A registry on 127.0.0.1 (a free port) serving ``build``'s image until the block ends."""
    state = Registry()
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(state))
    server.daemon_threads = True
    state.port = server.server_address[1]
    build(state)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()



"""util.publish: the one reading and spelling of a PublishPort= value, and the URL a client on this host uses for
it; the recipe's base URL, render's PublishPort=, status's endpoint, doctor's exposure rule and the dry run all
take it from here."""

from __future__ import annotations

import pytest
from tests.deploy.test_status_endpoint import PUBLISHED

from rigctl.doctor.rules.exposure import split_publish
from rigctl.host.facts import Listener, Ports
from rigctl.recipe.model import http_url
from rigctl.util.publish import (
    client_url,
    endpoint_of,
    every_address,
    loopback_only,
    parse_publish,
    spell_publish,
)


@pytest.mark.parametrize(("spec", "url"), [*PUBLISHED.items(),
                                           ("[fd00::7]:9000:8000/tcp", "http://[fd00::7]:9000"),
                                           ("127.0.0.1:9000:8000/udp", None),  # HTTP is TCP
                                           ("127.0.0.1:8000-8003:8000-8003", None),  # a range: no one port
                                           ("box.example:9000:8000", None),  # podman takes an IP address only
                                           ("127.0.0.1:99999:8000", None)])
def test_one_reading_of_a_publish_value(spec: str, url: str | None) -> None:
    assert endpoint_of(spec) == url
    published = parse_publish(spec)
    assert published.spec == spec  # spelt back as it was written
    ip, host_port, container_port, proto = split_publish(spec)  # doctor's reading is the same
    assert (ip, host_port, container_port, proto) == (published.shown_address, published.host_port,
                                                      published.container_port, published.proto)


@pytest.mark.parametrize(("address", "url"), [("0.0.0.0", "http://127.0.0.1:8000"), ("::", "http://[::1]:8000"),
                                              ("[::]", "http://[::1]:8000"), ("::1", "http://[::1]:8000"),
                                              (None, "http://127.0.0.1:8000"), ("", "http://127.0.0.1:8000"),
                                              ("gpu-box.local", "http://gpu-box.local:8000")])
def test_the_recipe_and_a_unit_name_the_same_url(address: str | None, url: str) -> None:
    assert client_url(address, 8000) == url
    if address and not address.startswith("["):
        assert http_url(address, 8000) == url  # Recipe.base_url's rule is this one
        if address != "gpu-box.local":
            assert endpoint_of(spell_publish(address, 8000, 8000)) == url  # what render writes, status reads


@pytest.mark.parametrize(("address", "every", "loopback"), [
    ("0.0.0.0", True, False), ("::", True, False), ("[::]", True, False), ("0:0:0:0:0:0:0:0", True, False),
    ("", True, False), ("*", True, False), ("127.0.0.1", False, True), ("127.0.0.2", False, True),
    ("::1", False, True), ("[0:0:0:0:0:0:0:1]", False, True), ("::ffff:127.0.0.1", False, True),
    ("localhost", False, True), ("192.168.1.5", False, False), ("fd00::7", False, False),
])
def test_every_spelling_of_an_address_means_the_same(address: str, every: bool, loopback: bool) -> None:
    """One reading of "every address" and "this host only", for the port check and doctor's exposure rule:
    the port check knew four spellings of every address (0:0:0:0:0:0:0:0 was none of them, so a clash on
    127.0.0.1:8000 went unseen), and doctor called [0:0:0:0:0:0:0:1] exposed and rewrote it."""
    assert every_address(address) is every
    assert loopback_only(address) is loopback


def test_a_port_held_on_loopback_clashes_with_every_address_however_spelt() -> None:
    ports = Ports(listening=[Listener(address="127.0.0.1", port=8000, pid=7, process="python3")])
    for address in ("0.0.0.0", "0:0:0:0:0:0:0:0", "::", "127.0.0.1"):
        assert ports.holder(8000, address) is not None, address
    assert ports.holder(8000, "192.168.1.5") is None and ports.holder(8001, "0:0:0:0:0:0:0:0") is None
    v6 = Ports(listening=[Listener(address="::1", port=8000)])
    assert v6.holder(8000, "0:0:0:0:0:0:0:1") is not None


def test_doctor_leaves_a_loopback_publish_alone_however_spelt() -> None:
    from rigctl.doctor.audit import audit
    from rigctl.doctor.host_state import DoctorFacts
    from rigctl.host.unit import Unit

    text = ("[Container]\nImage=docker.io/vllm/vllm-openai:v1@sha256:" + "1" * 64 + "\nExec=--model /m\n"
            "PublishPort=[0:0:0:0:0:0:0:1]:8000:8000\n[Service]\nRestart=always\n")
    assert audit([Unit.of("/u/l.container", text)], DoctorFacts()) == []
    exposed = text.replace("[0:0:0:0:0:0:0:1]", "[0:0:0:0:0:0:0:0]")
    assert {f.id for f in audit([Unit.of("/u/l.container", exposed)], DoctorFacts())} == {"published-without-auth"}

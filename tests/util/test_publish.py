"""util.publish: the one reading and spelling of a PublishPort= value, and the URL a client on this host uses for
it; the recipe's base URL, render's PublishPort=, status's endpoint, doctor's exposure rule and the dry run all
take it from here."""

from __future__ import annotations

import pytest
from tests.deploy.test_status_endpoint import PUBLISHED

from rigctl.doctor.rules.exposure import split_publish
from rigctl.recipe.model import http_url
from rigctl.util.publish import client_url, endpoint_of, parse_publish, spell_publish


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

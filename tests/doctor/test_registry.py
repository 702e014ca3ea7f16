"""The doctor's rule registry (issue #11): every rule is one function plus one entry, unit-level and
host-level alike, and the host-level ones read only the facts handed in."""

from __future__ import annotations

import re

from rigctl.doctor.audit import audit
from rigctl.doctor.host_state import DoctorFacts, local_facts
from rigctl.doctor.rules import HOST_RULES, REGISTRY, UNIT_RULES
from rigctl.host.quadlet import find_quadlet
from rigctl.host.unit import Unit
from rigctl.places import Scope

PIN = "docker.io/x/y@sha256:" + "0" * 64
GOOD = f"[Container]\nImage={PIN}\n[Service]\nRestart=always\n"


def test_every_rule_has_one_entry_with_a_stable_id() -> None:
    ids = [rule.id for rule in REGISTRY]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", i) for i in ids)
    assert {"restart-not-always", "published-without-auth"} <= {r.id for r in UNIT_RULES}
    assert {"cdi-spec-stale", "cdi-spec-missing", "quadlet-missing"} <= {r.id for r in HOST_RULES}
    assert all(rule.severity in ("fail", "warn", "info") and rule.summary for rule in REGISTRY)


def test_a_container_without_the_generator_of_its_manager() -> None:
    system = Unit.of("/etc/containers/systemd/llm.container", GOOD, scope="system")
    user = Unit.of("/root/.config/containers/systemd/llm.container", GOOD, scope="user")
    given = Unit.of("/srv/units/llm.container", GOOD, scope="path")  # --path: not installed here, not judged
    facts = DoctorFacts(quadlet={"system": None, "user": "/run/systemd/user-generators/podman-user-generator"})
    findings = audit([system, user, given], facts)
    assert [(f.id, f.unit, f.severity) for f in findings] == [("quadlet-missing", system.path, "fail")]
    assert "systemctl daemon-reload" in findings[0].fix
    assert audit([system, user, given], DoctorFacts()) == []  # not looked for: nothing said


def test_local_facts_look_for_the_generator_of_each_scope_in_use() -> None:
    units = [Unit.of("/etc/containers/systemd/a.container", GOOD, scope="system"),
             Unit.of("/srv/b.container", GOOD, scope="path")]
    facts = local_facts(units, driver_file="/nonexistent/version", cdi_dirs=[])
    assert dict(facts.quadlet) == {"system": find_quadlet(Scope.SYSTEM)}

"""`rigctl explain ID` says why each check exists (most preflight checks had no "why" at all, and a verify
check's "why" repeated its "guards" word for word) and lists each fix once (podman's listed "install podman
>= 5.0" beside two fixes that say it and more)."""

from __future__ import annotations

import io

from rigctl.cli.checklist import WHY, all_checks, dedupe, find
from rigctl.cli.views.meta import explain


def test_every_check_says_why_and_not_what_it_guards_again() -> None:
    checks = all_checks()
    assert not [c.id for c in checks if not c.about]
    assert not [c.id for c in checks if c.about and c.about.lower().startswith(c.summary.lower())]
    assert set(WHY) <= {c.id for c in checks}  # no entry for a check that is gone


def test_no_fix_is_said_twice() -> None:
    for c in all_checks():
        assert dedupe(c.fixes) == c.fixes, c.id
    (podman,) = find("podman")
    assert "install podman >= 5.0" not in podman.fixes
    assert "install podman >= 5.0, or a quadlet generator from a newer release" in podman.fixes


def test_dedupe() -> None:
    fixes = ["resume the download: …", "install x", "install x, or y", "resume the download: …", "check `z`"]
    assert dedupe(fixes) == ["resume the download: …", "install x, or y", "check `z`"]


def test_explain_prints_the_why() -> None:
    out = io.StringIO()
    explain(find("podman") + find("smoke"))(out)
    text = out.getvalue()
    assert "  why:     Quadlet arrived with podman 4.4" in text
    smoke = text[text.index("smoke (verify check)"):]
    guards = smoke.split("\n")[1].removeprefix("  guards:  ")
    assert guards and guards not in smoke[smoke.index("why:"):].replace("\n           ", " ")


def test_a_doctor_rule_says_its_own_why_not_a_module_docstring() -> None:
    # before: a rule without a docstring of its own was explained by its module's (RST, internal names)
    from rigctl.doctor.rules import REGISTRY

    doctor = {c.id: c for c in all_checks() if c.kind == "doctor"}
    assert set(doctor) == {r.id for r in REGISTRY}
    for rule in REGISTRY:
        about = doctor[rule.id].about or ""
        assert rule.why and about.lower().startswith(rule.why[:40].lower()), rule.id
        assert "``" not in about and "Rules about" not in about and "rigctl." not in about, (rule.id, about)
    out = io.StringIO()
    explain(find("unit-restarting"))(out)
    assert "facts.live" not in out.getvalue() and "serves nothing" in out.getvalue()

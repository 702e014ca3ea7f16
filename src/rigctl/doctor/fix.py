"""``doctor --fix``: plan the edits of every fixable unit (pure), and write them (all or none).

``plan_fixes`` applies the edits the rules proposed to the parsed lines of the unit's files (read once,
by the audit) and returns the new texts, spelt once; nothing is written there. ``rewrite`` is the only
writer: it finds each file again without following links, checks it is still what doctor read, keeps a
backup and renames every new text in at once.
What ``--fix`` may touch at all (``fix_refusal``) is decided from where discovery found the file.
"""

from __future__ import annotations

import difflib
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass

from rigctl.doctor.audit import read_units, unit_findings
from rigctl.doctor.edits import apply_edit
from rigctl.doctor.host_state import DoctorFacts
from rigctl.host.unit import Unit
from rigctl.host.unitfile import lines_with_ends
from rigctl.host.unitsnapshot import Found, Snapshot
from rigctl.util import safefs
from rigctl.util.interrupts import sigint_deferred
from rigctl.util.safefs import SafeDir


@dataclass(frozen=True)
class FileChange:
    """One file's new text: shown as a patch, and what ``rewrite`` writes."""

    path: str
    before: str  # the text doctor read: rewrite() replaces the file only while it still holds this text
    after: str

    def diff(self) -> str:
        return "".join(difflib.unified_diff(
            lines_with_ends(self.before), lines_with_ends(self.after),  # "\n" only, never splitlines()
            fromfile=f"a{self.path}" if self.path.startswith("/") else f"a/{self.path}",
            tofile=f"b{self.path}" if self.path.startswith("/") else f"b/{self.path}",
        ))


@dataclass(frozen=True)
class FixPlan:
    unit: Unit
    managed: bool
    fixed: tuple[str, ...]  # finding ids the changes address
    changes: tuple[FileChange, ...]

    def patch(self) -> str:
        return "".join(c.diff() for c in self.changes)

    def fixed_unit(self) -> Unit:
        """The unit as the changes leave it: the changed files are read again (what --fix wrote, as its
        readers will read it), the others keep what was parsed of them."""
        return self.unit.with_texts({c.path: c.after for c in self.changes})


def plan_fixes(units: Sequence[Unit], facts: DoctorFacts) -> list[FixPlan]:
    """For every unit with auto-fixable findings: the rewritten files. Nothing is written here."""
    contexts, _ = read_units(units, facts)
    plans: list[FixPlan] = []
    for ctx in contexts:
        draft = ctx.unit.edits()
        fixed: list[str] = []
        for finding, edits in unit_findings(ctx):
            if not edits:
                continue
            for edit in edits:
                apply_edit(edit, draft)
            fixed.append(finding.id)
        before = ctx.unit.texts()
        changes = tuple(FileChange(p, before[p], after) for p, after in draft.changed().items())
        if changes:
            plans.append(FixPlan(ctx.unit, ctx.unit.managed, tuple(fixed), changes))
    return plans


# --- writing -----------------------------------------------------------------------------------------


def fix_refusal(path: str, snap: Snapshot) -> str | None:
    """Why ``doctor --fix`` must not rewrite ``path`` (None: it may). Only a regular file read from
    this host, not a link, owned by the owner of the directory it was found in."""
    found = snap.found.get(path)
    if found is None:
        return "not a file doctor read from a directory on this host"
    if found.link:
        return "a symbolic link: --fix never writes through a link (fix the file it points to, or replace the link)"
    if found.st.st_uid != found.owner:
        where = found.root.anchor or found.root.path
        return (f"owned by uid {found.st.st_uid}, not by uid {found.owner} who owns {where}: "
                "--fix rewrites only files owned by the owner of their directory")
    return None


def rewrite(changes: Sequence[FileChange], snap: Snapshot) -> dict[str, str]:
    """Apply every change or none. Each file is found again without following links and must still be
    the entry (device, inode) that was audited, with the same text; its old text is kept as a new
    ``NAME.bak`` (or ``.bak.N``: an earlier backup is never overwritten), created exclusively with the
    file's mode and owner; the new text is staged beside it and all are renamed in at once, with Ctrl-C
    held. Returns {path: backup path}. Raises InvalidInputError, having changed nothing, when a file
    moved, changed or cannot be written."""
    opened: list[tuple[FileChange, SafeDir, Found]] = []
    backups: list[tuple[SafeDir, str]] = []
    staged: list[tuple[SafeDir, str, str]] = []  # (dir, temporary, name)
    done: list[tuple[FileChange, SafeDir, Found]] = []
    try:
        for change in changes:
            refusal = fix_refusal(change.path, snap)
            if refusal:
                raise safefs.refuse(change.path, refusal)
            found = snap.found[change.path]
            d = snap.directory(found)
            opened.append((change, d, found))
            name = found.rel[-1]
            st = d.lstat(name)
            if st is None or (st.st_dev, st.st_ino) != (found.st.st_dev, found.st.st_ino) \
                    or not stat.S_ISREG(st.st_mode) or st.st_uid != found.owner:
                raise safefs.refuse(change.path, "replaced since doctor read it: nothing was changed; run doctor again")
            if d.read_text(name, limit=safefs.UNIT_LIMIT) != change.before:
                raise safefs.refuse(change.path, "edited since doctor read it: nothing was changed; run doctor again")
        for change, d, found in opened:
            owner = (found.st.st_uid, found.st.st_gid)
            name = found.rel[-1]
            backups.append((d, d.backup(name, change.before.encode(), mode=found.st.st_mode, owner=owner)))
            staged.append((d, d.stage(name, change.after.encode(), mode=found.st.st_mode, owner=owner), name))
        with sigint_deferred():
            try:
                for (d, tmp, name), item in zip(staged, opened, strict=True):
                    d.commit(tmp, name)
                    done.append(item)
            except BaseException:
                for change, d, found in done:  # put back what was already renamed in
                    d.write_atomic(found.rel[-1], change.before.encode(), mode=found.st.st_mode,
                                   owner=(found.st.st_uid, found.st.st_gid))
                done.clear()
                raise
            for _, d, _ in opened:
                d.sync()
    except BaseException:
        for d, tmp, _ in staged:
            d.discard(tmp)
        if not done:
            for d, backup in backups:
                d.discard(backup)
        raise
    finally:
        for _, d, _ in opened:
            d.close()
    return {change.path: os.path.join(d.path, b) for (change, _, _), (d, b) in zip(opened, backups, strict=True)}

"""Issue #15, the rest: output that pipes, the podman and the scope taken from the host, names that find their
recipe, tables that follow COLUMNS without breaking a command, --quiet/--verbose, and a README that lists
the commands and exit codes there are. Every case runs rigctl as an operator types it (a real process,
text and --json), on the testbed where it needs one, in the flavour found (``podman_flavour``): podman 4.3
with the quadlet 5.4 generator the testbed installs for the user manager only (and points RIGCTL_QUADLET
at), or podman 5.4 with the generators its package installs for both managers; a `systemd --user` manager."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import podman_flavour, require_or_skip

from rigctl.exitcodes import ExitCode
from rigctl.host.quadlet import find_quadlet
from rigctl.places import Scope
from rigctl.recipe.load import load

pytestmark = pytest.mark.timeout(180)

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "tests" / "fixtures" / "inventory" / "h200.json"  # a captured box without podman
README = REPO / "README.md"
USER_GENERATOR = Path("/run/systemd/user-generators/podman-user-generator")  # what .ci/testbed.sh installs (4.3)
# where Debian 13's podman package installs quadlet for each manager (the podman 5.4 flavour)
PACKAGED_GENERATORS = {Scope.SYSTEM: "/usr/lib/systemd/system-generators/podman-system-generator",
                       Scope.USER: "/usr/lib/systemd/user-generators/podman-user-generator"}
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def rigctl(*args: str, env: Mapping[str, str | None] | None = None,
           timeout: float = 90) -> subprocess.CompletedProcess[str]:
    """``python -m rigctl ARGS`` with ``env`` over this environment (None removes a variable)."""
    full = {k: v for k, v in os.environ.items() if k not in {"FORCE_COLOR", "NO_COLOR", "COLUMNS"}}
    for key, value in (env or {}).items():
        if value is None:
            full.pop(key, None)
        else:
            full[key] = value
    done = subprocess.run([sys.executable, "-m", "rigctl", *args], capture_output=True, text=True, env=full,
                          timeout=timeout, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def one_json(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(done.stdout)  # exactly one object, or this raises
    return doc


def need_testbed_podman() -> str:
    """The testbed's podman as rigctl names it, ``4.3`` or ``5.4`` (``podman_flavour``)."""
    major, minor = podman_flavour()
    require_or_skip(os.environ.get("RIGCTL_QUADLET") is not None, "the testbed environment (. .testbed/env)")
    return f"{major}.{minor}"


def quadlet_generates(unit_text: str, tmp: Path, *, user: bool = False) -> str:
    """Run the testbed's real quadlet generator on ``unit_text`` saved as x.container: its dry run must
    be clean, and as a generator it must write x.service, whose text is returned."""
    quadlet = find_quadlet(Scope.USER)
    require_or_skip(quadlet is not None, "a quadlet generator (.ci/get-quadlet.sh)")
    assert quadlet is not None
    units, out = tmp / "units", tmp / "generated"
    units.mkdir()
    out.mkdir()
    (units / "x.container").write_text(unit_text)
    env = {**os.environ, "QUADLET_UNIT_DIRS": str(units)}
    flags = ["-user"] if user else []
    dry = subprocess.run([quadlet, "-no-kmsg-log", *flags, "-dryrun"], capture_output=True, text=True, env=env,
                         timeout=30, check=False)
    assert dry.returncode == 0, dry.stderr
    assert "unsupported key" not in dry.stderr and "error" not in dry.stderr.lower(), dry.stderr
    gen = subprocess.run([quadlet, "-no-kmsg-log", *flags, str(out)], capture_output=True, text=True, env=env,
                         timeout=30, check=False)
    assert gen.returncode == 0, gen.stderr
    service = out / "x.service"
    assert service.is_file(), f"quadlet generated no x.service: {dry.stdout}{dry.stderr}"
    return service.read_text()


# --- 1. `rigctl render RECIPE > x.container` is a unit ---------------------------------------------------


def test_render_to_a_file_is_a_unit_the_real_quadlet_generates(tmp_path: Path) -> None:
    done = rigctl("render", "qwen3-8b-vllm", "--inventory", str(H200))
    assert done.returncode == 0, done.stderr
    (tmp_path / "x.container").write_text(done.stdout)  # what `> x.container` leaves
    service = quadlet_generates((tmp_path / "x.container").read_text(), tmp_path)
    assert re.search(r"^ExecStart=/usr/bin/podman run ", service, re.M) and "\nRestart=always\n" in service
    # stdout is the unit alone; where it installs, the notes and the service went to stderr
    assert done.stdout.startswith("# rigctl-qwen3-8b-vllm.container: rendered by rigctl")
    assert done.stdout.rstrip().endswith("WantedBy=multi-user.target")
    assert not re.search(r"^(###|note \(|service:|gpu \d)", done.stdout, re.M)
    assert "### rigctl-qwen3-8b-vllm.container (installs as /etc/containers/systemd/" in done.stderr
    assert "rigctl render: note (info): podman not found on " in done.stderr  # the box has none: 5.4
    assert "rigctl render: service: rigctl-qwen3-8b-vllm.service (system), for podman 5.4" in done.stderr
    doc = one_json(rigctl("render", "qwen3-8b-vllm", "--inventory", str(H200), "--json"))
    assert doc["files"][0]["text"] == done.stdout and doc["versions_from"] == "inventory"
    assert any(n["kind"] == "info" and "podman not found" in n["message"] for n in doc["notes"])


def test_render_out_prints_the_paths_written(tmp_path: Path) -> None:
    done = rigctl("render", "qwen3-8b-vllm", "--inventory", str(H200), "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{tmp_path / 'rigctl-qwen3-8b-vllm.container'}\n"
    assert (tmp_path / "rigctl-qwen3-8b-vllm.container").read_text().startswith("# rigctl-qwen3-8b-vllm.container")


# --- 2. render is gated by the installed podman ----------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("scope", ["system", "user"])
def test_render_here_is_the_unit_up_would_install(scope: str, tmp_path: Path) -> None:
    podman = need_testbed_podman()
    flag = ["--user"] if scope == "user" else ["--system"]
    done = rigctl("render", "qwen3-8b-vllm", "--scope", scope)
    assert done.returncode == 0, done.stderr
    assert f"for podman {podman}\n# (quadlet 5.4)." in done.stdout  # the header says what it is rendered for
    if podman == "4.3":  # podman 4.3, driven by trixie's quadlet 5.4
        assert "ExecStartPre=-/bin/rm -f %t/%N.cid" in done.stdout  # 4.3 leaves the cid file behind
        assert "Notify=healthy" not in done.stdout  # 4.3 rejects --sdnotify=healthy
        assert f"({scope}), for podman 4.3 with quadlet 5.4 (this host's)" in done.stderr
    else:  # podman 5.4 and its own quadlet: one version to name
        assert "%N.cid" not in done.stdout  # 5.x removes its cid file itself
        assert re.search(r"^Notify=healthy$", done.stdout, re.M)
        assert f"({scope}), for podman 5.4 (this host's)" in done.stderr
    doc = one_json(rigctl("render", "qwen3-8b-vllm", "--scope", scope, "--json"))
    assert (doc["podman_version"], doc["quadlet_version"], doc["versions_from"]) == (podman, "5.4", "host")
    plan = one_json(rigctl("up", "qwen3-8b-vllm", "--dry-run", *flag, "--json"))
    assert (plan["podman_version"], plan["quadlet_version"]) == (podman, "5.4")
    assert plan["files"][0]["text"] == done.stdout == doc["files"][0]["text"]  # identical, byte for byte
    quadlet_generates(done.stdout, tmp_path, user=scope == "user")


@pytest.mark.integration
def test_render_without_podman_says_so_and_renders_for_the_default(tmp_path: Path) -> None:
    bare = tmp_path / "bin"
    bare.mkdir()
    env = {"PATH": str(bare), "XDG_RUNTIME_DIR": str(tmp_path), "CONTAINER_HOST": None}
    done = rigctl("render", "qwen3-8b-vllm", env=env)
    assert done.returncode == 0, done.stderr
    assert "rigctl render: note (info): podman not found on this host: the unit is rendered for podman 5.4" \
        in done.stderr
    assert "for podman 5.4\n# (quadlet 5.4)." in done.stdout and "Notify=healthy" in done.stdout
    doc = one_json(rigctl("render", "qwen3-8b-vllm", "--json", env=env))
    assert doc["podman_version"] == "5.4" and doc["versions_from"] == "host"
    assert any("podman not found on this host" in n["message"] for n in doc["notes"])
    assert not [line for line in done.stdout.splitlines() if line.startswith("rigctl render")]


# --- 3. scope: preflight --user/--system, and the way out when only the user scope can run it -------------


def without_override() -> tuple[str, dict[str, str | None]]:
    """The testbed's podman (``4.3`` or ``5.4``) and this testbed as root sees it without RIGCTL_QUADLET
    (which serves both scopes): the generators systemd itself would run. On the 4.3 flavour that is a root
    without a system quadlet, only the generator the testbed links for the user manager; on the 5.4
    flavour, the generators podman's package installs for both managers."""
    podman = need_testbed_podman()
    env: dict[str, str | None] = {"RIGCTL_QUADLET": None}
    saved = os.environ.pop("RIGCTL_QUADLET")
    try:
        system, user = find_quadlet(Scope.SYSTEM), find_quadlet(Scope.USER)
    finally:
        os.environ["RIGCTL_QUADLET"] = saved
    if podman == "4.3":
        require_or_skip(os.geteuid() == 0 and system is None and user == str(USER_GENERATOR),
                        f"root, no system quadlet and the testbed's user one (found {system!r}, {user!r})")
    else:
        packaged = (PACKAGED_GENERATORS[Scope.SYSTEM], PACKAGED_GENERATORS[Scope.USER])
        require_or_skip(os.geteuid() == 0 and (system, user) == packaged,
                        f"root and podman 5.4's packaged generators {packaged} (found {system!r}, {user!r})")
    return podman, env


def paragraphs_from(text: str, start: str, count: int) -> list[str]:
    """`count` paragraphs of the report, from the line that begins with `start`: a paragraph is a line
    at the margin and the indented lines that continue it."""
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(start))
    out: list[str] = []
    for line in lines[first:]:
        if line.startswith(" ") and out:
            out[-1] += " " + line.strip()
        elif len(out) < count and line:
            out.append(line)
        else:
            break
    assert len(out) == count, text
    return out


@pytest.mark.integration
def test_preflight_checks_the_scope_it_is_given() -> None:
    podman_version, env = without_override()
    system = one_json(rigctl("preflight", "qwen3-8b-vllm", "--system", "--json", env=env))
    user = one_json(rigctl("preflight", "qwen3-8b-vllm", "--user", "--json", env=env))
    default = one_json(rigctl("preflight", "qwen3-8b-vllm", "--json", env=env))  # root: system, as `up`
    assert (system["scope"], user["scope"], default["scope"]) == ("system", "user", "system")
    podman = {d["scope"]: next(f for f in d["findings"] if f["id"] == "podman") for d in (system, user)}
    text = rigctl("preflight", "qwen3-8b-vllm", env=env)
    assert text.returncode == 1
    if podman_version == "4.3":  # only the user manager has a generator: the system scope fails, and says so
        assert podman["system"]["severity"] == "fail" and "for the system manager" in podman["system"]["message"]
        assert podman["user"]["severity"] == "warn" and str(USER_GENERATOR) in podman["user"]["message"]
        assert "`rigctl preflight qwen3-8b-vllm --user`" in system["scope_hint"] and user["scope_hint"] is None
        hint = text.stdout.split("\nhint: ", 1)[1]  # prose, wrapped to the width: compare its words
        assert hint.split() == system["scope_hint"].split()
    else:  # each manager has its packaged generator: either scope passes, and no other scope is suggested
        assert podman["system"]["severity"] == podman["user"]["severity"] == "ok", podman
        assert system["scope_hint"] is None and user["scope_hint"] is None and default["scope_hint"] is None
        assert "\nhint: " not in text.stdout
        manager = {d["scope"]: next(f for f in d["findings"] if f["id"] == "systemd")["message"]
                   for d in (system, user)}
        assert "system manager" in manager["system"] and "user manager" in manager["user"], manager


@pytest.mark.integration
def test_up_dry_run_names_the_scope_and_suggests_user() -> None:
    podman, env = without_override()
    text = rigctl("up", "qwen3-8b-vllm", "--dry-run", env=env)
    doc = one_json(rigctl("up", "qwen3-8b-vllm", "--dry-run", "--json", env=env))
    user = one_json(rigctl("up", "qwen3-8b-vllm", "--dry-run", "--user", "--json", env=env))
    assert user["render_error"] is None and user["quadlet_version"] == "5.4" and user["scope_hint"] is None
    render = rigctl("render", "qwen3-8b-vllm", "--json", env=env)
    if podman == "5.4":  # the system manager has its generator: the unit is planned for it, nothing suggested
        assert "planned on this host for the system manager: podman 5.4 with quadlet 5.4\n" in text.stdout
        assert "cannot render the unit" not in text.stdout and "\nhint: " not in text.stdout
        assert (doc["render_error"], doc["scope_hint"], doc["quadlet_version"]) == (None, None, "5.4")
        assert render.returncode == 0 and one_json(render)["files"][0]["text"] == doc["files"][0]["text"]
        return
    assert "planned on this host for the system manager: podman 4.3\n" in text.stdout
    # prose, wrapped to the width: the refusal's paragraph, then the hint's, compared by their words
    refusal, after = paragraphs_from(text.stdout, "cannot render the unit: ", count=2)
    assert "no quadlet generator for the system manager" in refusal
    hint = (f"hint: the system manager has no quadlet generator here, the user manager has one "
            f"({USER_GENERATOR}): `rigctl up qwen3-8b-vllm --dry-run --user`")
    assert after.split() == hint.split()
    assert "system manager" in doc["render_error"]
    assert doc["scope_hint"].split() == hint.removeprefix("hint: ").split()
    assert render.returncode == ExitCode.INVALID_INPUT
    error = one_json(render)["error"]
    assert "system manager" in error["message"] and "`rigctl render qwen3-8b-vllm --user`" in error["fix"]


# --- 4. validate NAME, and a file whose name: is not its file name ---------------------------------------


def user_recipe(tmp_path: Path, file_name: str, name: str) -> Path:
    directory = tmp_path / "config" / "rigctl" / "recipes"
    directory.mkdir(parents=True, exist_ok=True)
    text = (REPO / "recipes" / "qwen3-8b-vllm.yaml").read_text().replace("name: qwen3-8b-vllm", f"name: {name}", 1)
    path = directory / file_name
    path.write_text(text)
    assert load(str(path)).recipe.name == name
    return path


def test_validate_takes_a_name_and_warns_of_a_name_that_is_not_the_file_name(tmp_path: Path) -> None:
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config")}
    by_name = rigctl("validate", "qwen3-8b-vllm", env=env)
    assert by_name.returncode == 0 and by_name.stdout.startswith("ok       qwen3-8b-vllm (qwen3-8b-vllm)\n")
    assert "warning" not in by_name.stdout
    path = user_recipe(tmp_path, "box.yaml", "my-qwen")
    text = rigctl("validate", "box", env=env)
    assert text.returncode == 0, text.stdout + text.stderr
    warning = text.stdout.splitlines()[1]
    assert warning.startswith(f"  warning: {path}: name: 'my-qwen' differs from the file name 'box'")
    assert "`rigctl show my-qwen` finds it by that name" in warning
    doc = one_json(rigctl("validate", str(path), "--json", env=env))
    (entry,) = doc["files"]
    assert entry["ok"] is True and entry["name"] == "my-qwen" and len(entry["warnings"]) == 1
    assert "'my-qwen'" in entry["warnings"][0] and "'box'" in entry["warnings"][0]
    # show, and every command, finds it by the name it is served under
    shown = one_json(rigctl("show", "my-qwen", "--json", env=env))
    assert shown["source"]["path"] == str(path) and shown["recipe"]["name"] == "my-qwen"
    assert rigctl("show", "my-qwen", env=env).stdout.startswith(f"# {path} (user)\n")


def test_a_name_two_files_claim_is_refused_naming_both(tmp_path: Path) -> None:
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config")}
    first, second = user_recipe(tmp_path, "a.yaml", "twice"), user_recipe(tmp_path, "b.yaml", "twice")
    done = rigctl("show", "twice", env=env)
    assert done.returncode == ExitCode.INVALID_INPUT
    assert f"2 files say `name: twice`: {first}, {second}" in done.stderr
    error = one_json(rigctl("show", "twice", "--json", env=env))["error"]
    assert str(first) in error["message"] and str(second) in error["message"] and "rename" in error["fix"]
    warned = one_json(rigctl("validate", str(first), "--json", env=env))["files"][0]["warnings"][0]
    assert "cannot tell which" in warned
    elsewhere = tmp_path / "loose.yaml"  # outside the recipe directories, under a bundled recipe's name
    elsewhere.write_text((REPO / "recipes" / "qwen3-8b-vllm.yaml").read_text())
    clash = one_json(rigctl("validate", str(elsewhere), "--json", env=env))["files"][0]["warnings"][0]
    assert f"`rigctl show qwen3-8b-vllm` finds another file, {REPO / 'recipes' / 'qwen3-8b-vllm.yaml'}" in clash


# --- 5. tables follow COLUMNS and never break the command to copy -----------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("columns", [80, 200])
@pytest.mark.parametrize("colour", [False, True], ids=["piped", "colour"])
def test_the_pull_command_is_whole_at_any_width(columns: int, colour: bool) -> None:
    need_testbed_podman()
    doc = one_json(rigctl("preflight", "qwen3-8b-vllm", "--json"))
    image = next(f for f in doc["findings"] if f["id"] == "image")
    require_or_skip(image["severity"] == "fail", "the recipe's image is not pulled on this testbed")
    recipe = load("qwen3-8b-vllm").recipe
    pull = f"`podman pull {recipe.image}`"
    assert pull in image["fix"]
    env = {"COLUMNS": str(columns), **({"FORCE_COLOR": "1"} if colour else {})}
    done = rigctl("preflight", "qwen3-8b-vllm", env=env)
    assert done.returncode == 1
    shown = ANSI.sub("", done.stdout)
    holding = [line for line in shown.splitlines() if pull in line]
    assert len(holding) == 1, shown  # the whole command, on one line
    others = [line for line in shown.splitlines() if "`" not in line]
    assert max(len(line) for line in others) <= columns, shown  # the table follows COLUMNS
    assert all(word in shown for word in image["fix"].replace(pull, "").split())  # the rest of it too


# --- 7. --quiet and --verbose ----------------------------------------------------------------------------


def test_quiet_render_is_the_unit_and_nothing_else() -> None:
    loud = rigctl("render", "qwen3-8b-vllm", "--inventory", str(H200))
    quiet = rigctl("-q", "render", "qwen3-8b-vllm", "--inventory", str(H200))
    assert quiet.returncode == 0 and quiet.stdout == loud.stdout and quiet.stderr == ""
    assert loud.stderr  # the notes it left out
    assert one_json(rigctl("--quiet", "render", "qwen3-8b-vllm", "--inventory", str(H200), "--json"))["ok"]


def test_quiet_preflight_and_dry_run_print_the_failures_and_the_verdict() -> None:
    doc = one_json(rigctl("preflight", "qwen3-8b-vllm", "--inventory", str(H200), "--json"))
    failing = [f for f in doc["findings"] if f["severity"] in ("fail", "error")]
    done = rigctl("-q", "preflight", "qwen3-8b-vllm", "--inventory", str(H200))
    assert done.returncode == 1 and done.stderr == ""
    expected = []
    for f in failing:
        expected += [f"{f['severity']} {f['id']}: {f['message']}", *([f"  fix: {f['fix']}"] if f["fix"] else [])]
    # the stack checks (#34) skip on a capture without stack facts or an inspected image
    assert done.stdout.splitlines() == [*expected, "not ready: 17 ok, 8 skip, 4 fail"]
    dry = rigctl("-q", "up", "qwen3-8b-vllm", "--dry-run", "--inventory", str(H200))
    assert dry.returncode == 1 and dry.stderr == ""
    assert dry.stdout.splitlines()[: len(expected) + 1] == done.stdout.splitlines()
    assert dry.stdout.splitlines()[-1] == "would install nothing"
    assert "[Container]" not in dry.stdout


_free_space = re.compile(r"[\d.,]+ GiB free")


@pytest.mark.integration
def test_verbose_shows_the_commands_rigctl_runs() -> None:
    need_testbed_podman()
    for argv in (["render", "qwen3-8b-vllm"], ["preflight", "qwen3-8b-vllm"],
                 ["up", "qwen3-8b-vllm", "--dry-run", "--user"]):
        plain, verbose = rigctl(*argv), rigctl("-v", *argv)
        assert verbose.returncode == plain.returncode, verbose.stderr
        # stdout is the same artefact (the host's free space may move between the two runs: not compared)
        assert _free_space.sub("<n> GiB free", verbose.stdout) == _free_space.sub("<n> GiB free", plain.stdout)
        shown = [line for line in verbose.stderr.splitlines() if line.startswith("+ ")]
        assert "+ podman version --format json" in shown and "+ podman images --format json" in shown, argv
        assert not [line for line in plain.stderr.splitlines() if line.startswith("+ ")]
    as_json = rigctl("--verbose", "render", "qwen3-8b-vllm", "--json")
    assert one_json(as_json)["command"] == "render" and "+ podman version --format json" in as_json.stderr


def test_quiet_and_verbose_together_is_a_usage_error() -> None:
    done = rigctl("-q", "-v", "recipes")
    assert done.returncode == ExitCode.USAGE and "exclude each other" in done.stderr
    doc = one_json(rigctl("-q", "-v", "recipes", "--json"))
    assert doc["ok"] is False and doc["error"]["code"] == "usage"


# --- 8. the README lists the commands and the exit codes there are ----------------------------------------


def help_commands(*argv: str) -> set[str]:
    done = rigctl(*argv, "--help", env={"COLUMNS": "120"})
    assert done.returncode == 0
    section = done.stdout.split("\nCommands:\n", 1)[1].split("\n\n", 1)[0]  # not the examples after it
    return {m.group(1) for m in re.finditer(r"^  ([a-z][a-z-]*)\s", section, re.M)}


def readme_commands() -> tuple[set[str], set[str]]:
    """The command words of the first column of the README's command table, and the fleet subcommands."""
    top: set[str] = set()
    fleet: set[str] = set()
    for line in README.read_text(encoding="utf-8").splitlines():
        if not line.startswith("| `rigctl "):
            continue
        cell = re.split(r"(?<!\\)\|", line)[1]  # the first cell; `\|` is a | inside it
        for span in re.findall(r"`([^`]+)`", cell):
            words = span.removeprefix("rigctl ").split()
            if not words or words[0].startswith("-"):  # `rigctl --version`: an option, not a command
                continue
            top.add(words[0])
            if words[0] == "fleet" and len(words) > 1:
                fleet |= set(words[1].split("\\|"))
    return top, fleet


def test_the_readme_command_table_is_the_help() -> None:
    top, fleet = readme_commands()
    assert top == help_commands(), "the README's command table and `rigctl --help` list other commands"
    assert fleet == help_commands("fleet"), "the README's fleet row and `rigctl fleet --help` differ"


def test_the_readme_exit_code_summary_names_every_code() -> None:
    text = README.read_text(encoding="utf-8")
    summary = text.split("Exit codes (`src/rigctl/exitcodes.py`", 1)[1].split("\n\n", 1)[0]
    assert {int(n) for n in re.findall(r"(?<![\w.])(\d+) [a-z]", summary)} == {int(code) for code in ExitCode}


def test_the_readme_says_which_set_up_command_is_for_users() -> None:
    text = README.read_text(encoding="utf-8")
    block = text.split("## On a fresh machine", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    users, developers = block.split("# FOR DEVELOPERS", 1)
    assert "# FOR USERS" in users and "tools/uv.py run --no-dev rigctl up" in users and "test" not in users.lower()
    assert "test suite" in developers and "bash .ci/test.sh" in developers

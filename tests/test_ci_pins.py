"""CI is reproducible: .ci/run installs every dependency at the version pinned in
.ci/constraints.txt, so a green run means the same thing on every machine (issue 9.15)."""

import os
import re
import subprocess
import textwrap
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]


def _pins():
    pins = {}
    for line in (ROOT / ".ci" / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"{line!r} is not an exact pin"
            pins[req.name.lower()] = spec.version
    return pins


def _declared_dependencies():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [Requirement(r).name.lower() for r in project["dependencies"]]
    for extra in ("test", "plot", "zoo"):
        names += [Requirement(r).name.lower() for r in project["optional-dependencies"][extra]]
    return names


def test_every_declared_dependency_is_pinned():
    pins = _pins()
    missing = [name for name in _declared_dependencies() if name not in pins]
    assert not missing, f"pin these in .ci/constraints.txt: {missing}"


def test_ci_run_installs_with_the_constraints():
    script = (ROOT / ".ci" / "run").read_text()
    installs = [line for line in script.splitlines()
                if re.match(r"\s*python -m pip install", line)]
    assert installs, ".ci/run installs nothing"
    for line in installs:
        assert "-c .ci/constraints.txt" in line, f"unpinned install in .ci/run: {line.strip()}"


def test_installed_versions_are_the_pins_on_ci():
    """Under CI (CI=true, set by .ci/run) the installed versions are exactly the pins. Elsewhere
    (the GPU machine's image, a developer's environment) other versions are expected."""
    if os.environ.get("CI") != "true":
        pytest.skip("checks the CI environment only (CI=true)")
    wrong = {}
    for name, version in _pins().items():
        try:
            installed = metadata.version(name).split("+")[0]
        except metadata.PackageNotFoundError:
            continue  # pinned for when it is pulled in (e.g. a transitive dependency)
        if installed != version:
            wrong[name] = (installed, version)
    assert not wrong, f"installed != pinned: {wrong}"


@pytest.mark.parametrize("platform_system, platform_machine, required", [
    ("Linux", "x86_64", True),
    ("Darwin", "arm64", False),
    ("Darwin", "x86_64", False),
    ("Windows", "AMD64", False),
    ("Linux", "aarch64", False),
])
def test_triton_is_required_only_where_its_wheels_exist(platform_system, platform_machine,
                                                         required):
    """pip resolves kernelkit on any platform: triton (wheels for Linux x86-64 only) carries an
    environment marker, and kernelkit works without it (tests/test_no_triton.py)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (triton,) = [Requirement(r) for r in project["dependencies"] if Requirement(r).name == "triton"]
    env = {"platform_system": platform_system, "platform_machine": platform_machine}
    assert triton.marker is not None and triton.marker.evaluate(env) is required


@pytest.mark.subprocess
def test_ci_run_runs_every_step_and_exits_with_the_worst_code():
    """Issue 37: a failing step does not stop the later ones (one run shows every failure), and
    the script exits with the worst exit code; pytest's "no tests collected" (5) counts as 1."""
    script = (ROOT / ".ci" / "run").read_text()
    start = script.index("worst=0")
    end = script.index("\nstep ", start)
    driver = "set -euo pipefail\n" + script[start:end] + textwrap.dedent("""
        step "first" sh -c 'exit 3'
        step "second" sh -c 'echo second ran'
        step "third" sh -c 'exit 5'
        step "fourth" true
        exit "$worst"
        """)
    res = subprocess.run(["bash", "-c", driver], capture_output=True, text=True, timeout=60)
    assert res.returncode == 3, res.stdout + res.stderr
    assert "second ran" in res.stdout
    assert "== third: exit code 1" in res.stdout and "collected no tests" in res.stderr
    assert "== fourth: exit code 0" in res.stdout

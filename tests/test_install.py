"""specdec as users install it: the wheel `pip install .` (pipx, uv tool) builds, installed
non-editable into a fresh environment, run through its own `specdec` script from a folder that
is not the checkout. (The tests' own environment has an editable install that reads the
checkout, so a package left out of the wheel passes every other test.)"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh environment holding the wheel and nothing else of specdec; its dependencies (torch,
    transformers, ...) are read from the tests' environment through a .pth line, whose own .pth
    files (the editable install's among them) are not processed."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"  # a copy: setuptools' build/ in the checkout may hold a stale package
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info", "__pycache__",
                                                                 ".pytest_cache", "results"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp / "dist"), str(source)], check=True, capture_output=True)
    wheel, = (tmp / "dist").glob("specdec-*.whl")
    env = tmp / "env"
    venv.create(env, with_pip=False)
    python = env / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                    "--disable-pip-version-check", str(wheel)], check=True, capture_output=True)
    return env


def run(env: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(env / "bin" / "specdec"), *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_the_wheel_holds_every_package(installed, tmp_path):
    code = "import specdec_cli, pkgutil; print(specdec_cli.__file__); " \
           "print(sorted(m.name for m in pkgutil.walk_packages(specdec_cli.__path__, 'specdec_cli.') if m.ispkg))"
    where, found = subprocess.run([str(installed / "bin" / "python"), "-c", code], cwd=tmp_path, check=True,
                                  capture_output=True, text=True).stdout.splitlines()
    assert str(ROOT) not in where and str(installed) in where  # the wheel's copy, not the checkout
    on_disk = sorted("specdec_cli." + ".".join(p.parent.relative_to(ROOT / "specdec_cli").parts)
                     for p in (ROOT / "specdec_cli").rglob("__init__.py") if p.parent != ROOT / "specdec_cli")
    assert set(on_disk) <= set(eval(found)), f"packages missing from the wheel: {set(on_disk) - set(eval(found))}"


def test_cards_and_a_toy_generate_run_from_the_wheel(installed, tmp_path):
    listed = run(installed, "cards", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "smollm2" in listed.stdout and "toy" in listed.stdout
    out = run(installed, "generate", "-c", "toy", "--json", "-n", "6", "ba be bi", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    import json

    result = json.loads(out.stdout)
    assert result["identical"] is True and len(result["spec"]["tokens"]) == 6


def test_version(installed, tmp_path):
    from specdec_cli import __version__

    out = run(installed, "--version", cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == f"specdec {__version__}"

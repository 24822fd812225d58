"""The product's wheel, built from a clean copy of what the image build copies (pyproject.toml,
README.md, functions/), holds the product alone: the functions and their runtime, the Trainer
and job controllers, the training API and doctor. The local cluster and stack, the Broker
emulation and the test tooling are tools/devstack's, a distribution of its own."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from tests.support import REPO

PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
# What must be in it, and what must not (paths inside the wheel).
EXPECTED = ("functions/__main__.py", "functions/runtime/serve.py", "functions/runtime/worker.py",
            "functions/jobs/controller.py", "functions/trainer/controller.py",
            "functions/api/app.py", "functions/doctor/cli.py", "functions/py.typed")
LOCAL_ONLY = ("devstack/", "tests/", "bench/", "functions/dev/", "functions/cluster/",
              "functions/testing/", "functions/runtime/router.py",
              "functions/runtime/post_server.py", "functions/runtime/recording.py")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(REPO / "functions", source / "functions",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path_factory.mktemp("wheel")
    # The venv's setuptools (pinned in the dev dependencies), as the image uses its own pin.
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--wheel-dir", str(out), str(source)],
                   check=True, capture_output=True, timeout=300)
    [built] = list(out.glob("*.whl"))
    return zipfile.ZipFile(built)


def test_the_wheel_holds_the_product(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    assert [n for n in EXPECTED if n not in names] == []


def test_the_wheel_holds_nothing_of_the_local_stack(wheel: zipfile.ZipFile) -> None:
    assert [n for n in wheel.namelist() if n.startswith(LOCAL_ONLY)] == []
    tops = {n.split("/", 1)[0] for n in wheel.namelist()}
    assert tops == {"functions", f"odh_training_functions-{PROJECT['version']}.dist-info"}


def test_the_wheel_s_metadata_is_the_project_s(wheel: zipfile.ZipFile) -> None:
    info = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    metadata = Parser().parsestr(wheel.read(info).decode())
    assert metadata["Version"] == PROJECT["version"]
    assert metadata["License-Expression"] == PROJECT["license"]
    requires = sorted(r for r in metadata.get_all("Requires-Dist") or [] if "extra ==" not in r)
    assert requires == sorted(PROJECT["dependencies"])


def test_the_image_build_copies_only_the_product() -> None:
    admitted = [line[1:] for line in (REPO / ".dockerignore").read_text().splitlines()
                if line.startswith("!")]
    assert "functions/" in admitted
    assert not [a for a in admitted if a.startswith(("tools", "tests", "bench"))]
    assert Path(REPO / "tools" / "devstack" / "pyproject.toml").is_file()

"""One version: the package metadata's (pyproject.toml). Every console script reports it, the
training API's OpenAPI document carries it, and every other place that names the release (the
image tags of the manifests, func.yaml, the Dockerfile, the README, docs/install.md) names the
same."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

import functions
from functions.api.app import create_api_app
from tests.api.test_fuzz import no_client
from tests.support import REPO

IMAGE = "quay.io/opendatahub/odh-training-functions"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def test_the_package_reports_the_metadata_version() -> None:
    assert functions.__version__ == VERSION


SCRIPTS = Path(sys.executable).parent  # console scripts sit beside the interpreter


@pytest.mark.parametrize(("command", "shown"), [
    pytest.param([sys.executable, "-m", "functions", "--version"], "python -m functions",
                 id="python-m-functions"),
    pytest.param([str(SCRIPTS / "odh-training"), "--version"], "odh-training",
                 id="odh-training"),
    pytest.param([str(SCRIPTS / "odh-training-jobs"), "--version"], "odh-training-jobs",
                 id="odh-training-jobs"),
    pytest.param([str(SCRIPTS / "kubectl-training"), "--version"], "kubectl training",
                 id="kubectl-plugin"),
])
def test_every_console_script_prints_its_name_and_the_version(command: list[str],
                                                              shown: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=REPO)
    assert done.stdout.startswith(shown + " ")
    assert done.stdout.split()[-1] == VERSION


def image_tags() -> list[tuple[str, str]]:
    """Every (file, tag) where a manifest names the image."""
    found: list[tuple[str, str]] = []
    for path in [*sorted((REPO / "config").rglob("*.yaml")), REPO / "func.yaml",
                 *sorted((REPO / "config").rglob("params.env"))]:
        if path.suffix == ".env":
            found += [(str(path.relative_to(REPO)), tag) for tag in
                      re.findall(rf"{re.escape(IMAGE)}:([\w.+-]+)", path.read_text())]
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if not isinstance(doc, dict):
                continue
            for image in doc.get("images") or []:  # a kustomization's images:
                if image.get("name") == IMAGE:
                    found.append((str(path.relative_to(REPO)), str(image["newTag"])))
        found += [(str(path.relative_to(REPO)), tag)
                  for tag in re.findall(rf"{re.escape(IMAGE)}:([\w.+-]+)", path.read_text())]
    return found


def test_the_manifests_name_the_image_of_this_version() -> None:
    tags = image_tags()
    assert len(tags) >= 7, tags
    assert any(name.endswith("params.env") for name, _ in tags)
    assert {tag for _, tag in tags} == {VERSION}, [t for t in tags if t[1] != VERSION]


@pytest.mark.parametrize(("path", "pattern"), [
    pytest.param("Dockerfile", r"^ARG VERSION=(\S+)$", id="dockerfile-arg"),
    pytest.param("Dockerfile", rf"{re.escape(IMAGE)}:(\S+)", id="dockerfile-build-line"),
    pytest.param("README.md", rf"{re.escape(IMAGE)}:(\S+?)`", id="readme"),
    pytest.param("docs/install.md", rf"{re.escape(IMAGE)}:(\S+?)`", id="docs-install"),
])
def test_other_places_name_this_version(path: str, pattern: str) -> None:
    found = re.findall(pattern, (REPO / path).read_text(), re.MULTILINE)
    assert found, f"{path} no longer names the version: update this test's pattern"
    assert set(found) == {VERSION}


def test_the_openapi_document_carries_the_version() -> None:
    client = create_api_app(no_client).test_client()  # the document needs no cluster
    assert client.get("/openapi.json").get_json()["info"]["version"] == VERSION

"""``make dist`` (hack/dist.sh): the release artifacts of this version, each what a user
applies or installs without a clone: the product wheel, the CRDs and three rendered installs,
named for the version, with checksums that verify, every install naming the image of this
version and equal to ``kustomize build`` of its directory."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import REPO

VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
NAME = f"odh-training-functions-{VERSION}"
IMAGE = "quay.io/opendatahub/odh-training-functions"
INSTALLS = {"crds": "config/crd", "kubernetes": "config/default",
            "openshift": "config/overlays/openshift", "rhoai": "config/overlays/rhoai"}
WHEEL = f"odh_training_functions-{VERSION}-py3-none-any.whl"

Obj = dict[str, Any]
# libyaml where PyYAML has it: the rendered installs carry the job CRDs' long schemas
LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@pytest.fixture(scope="module")
def dist(bin_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(["bash", str(REPO / "hack" / "dist.sh"), str(out)],
                          env={**os.environ, "KUSTOMIZE": str(bin_dir / "kustomize"),
                               "PYTHON": sys.executable},
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(out / f) for f in (
        WHEEL, *(f"{NAME}-{kind}.yaml" for kind in INSTALLS), "SHA256SUMS")]
    return out


@pytest.fixture(scope="module")
def rendered(dist: Path) -> dict[str, list[Obj]]:
    return {kind: [doc for doc in yaml.load_all((dist / f"{NAME}-{kind}.yaml").read_text(),
                                               Loader=LOADER) if doc]
            for kind in INSTALLS}


def images(objs: list[Obj]) -> list[str]:
    """Every container image the objects name (Knative Services and Deployments alike)."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "image" and isinstance(value, str):
                    found.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(objs)
    return found


def test_the_checksums_verify(dist: Path) -> None:
    lines = (dist / "SHA256SUMS").read_text().splitlines()
    assert len(lines) == 1 + len(INSTALLS)
    for line in lines:
        digest, name = line.split("  ")
        assert hashlib.sha256((dist / name).read_bytes()).hexdigest() == digest, name
    done = subprocess.run(["sha256sum", "--check", "--quiet", "SHA256SUMS"], cwd=dist,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_wheel_is_this_version_of_the_product(dist: Path) -> None:
    with zipfile.ZipFile(dist / WHEEL) as wheel:
        names = wheel.namelist()
        metadata = Parser().parsestr(
            wheel.read(f"odh_training_functions-{VERSION}.dist-info/METADATA").decode())
    assert metadata["Version"] == VERSION
    assert "functions/__main__.py" in names
    assert not [n for n in names if n.startswith(("devstack/", "tests/", "bench/"))]


@pytest.mark.parametrize("kind", [pytest.param(k, id=k) for k in INSTALLS])
def test_each_install_is_its_directory_rendered(dist: Path, bin_dir: Path, kind: str) -> None:
    done = subprocess.run([str(bin_dir / "kustomize"), "build", str(REPO / INSTALLS[kind])],
                          capture_output=True, text=True, timeout=120, check=True)
    assert (dist / f"{NAME}-{kind}.yaml").read_text() == done.stdout


@pytest.mark.parametrize("kind", [pytest.param(k, id=k) for k in INSTALLS if k != "crds"])
def test_each_install_runs_the_image_of_this_version(rendered: dict[str, list[Obj]],
                                                     kind: str) -> None:
    ours = [i for i in images(rendered[kind])
            if i.startswith(IMAGE + ":") or i.startswith(IMAGE + "@")]
    assert ours and set(ours) == {f"{IMAGE}:{VERSION}"}, ours


def test_the_crds_are_every_crd_and_the_admission_policy(
        rendered: dict[str, list[Obj]]) -> None:
    objs = rendered["crds"]
    kinds = sorted({o["kind"] for o in objs})
    assert kinds == ["CustomResourceDefinition", "ValidatingAdmissionPolicy",
                     "ValidatingAdmissionPolicyBinding"]
    names = {o["metadata"]["name"] for o in objs if o["kind"] == "CustomResourceDefinition"}
    assert names == {p.stem for p in (REPO / "config" / "crd").glob("*.*.yaml")}

"""Fixtures of the Trainer tests: the kustomize binary and the manifest trees.

The upstream trainer manifests come from the session's ``upstream_manifests`` (the fetch
script's cache), copied by that script again (``--from``, as an offline image build would) so
that no test can alter the cache; the runtimes and ImageStreams are this repository's
``manifests/``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devstack.cluster.manifests import apply_objects, load_documents
from functions.kube import resources
from functions.kube.client import KubeClient
from functions.trainer import controller
from functions.trainer.render import Sources
from tests.trainer import harness
from tests.trainer.harness import Obj, load

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def kustomize_bin() -> str:
    preset = os.environ.get("KUSTOMIZE_BIN")
    if preset:
        return preset
    done = subprocess.run(["bash", str(REPO / "hack" / "ensure-testbin.sh")],
                          env={**os.environ, "TESTBIN_ONLY": "kustomize"},
                          capture_output=True, text=True, check=True)
    binary = Path(done.stdout.strip().splitlines()[-1]) / "kustomize"
    assert os.access(binary, os.X_OK), f"no kustomize in {binary.parent}"
    return str(binary)


@pytest.fixture(scope="session")
def trainer_tree(tmp_path_factory: pytest.TempPathFactory, upstream_manifests: Path) -> Path:
    dest = tmp_path_factory.mktemp("manifests") / "trainer"
    subprocess.run(["bash", str(REPO / "hack" / "get_trainer_manifests.sh"),
                    "--from", str(upstream_manifests), str(dest)],
                   check=True, capture_output=True)
    return dest


@pytest.fixture
def trainer_env(kustomize_bin: str, trainer_tree: Path,
                monkeypatch: pytest.MonkeyPatch) -> Sources:
    """Point the render adapter at the test trees (and clear RELATED_IMAGE_* overrides)."""
    for name in list(os.environ):
        if name.startswith("RELATED_IMAGE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("KUSTOMIZE_BIN", kustomize_bin)
    monkeypatch.setenv("TRAINER_MANIFESTS_ROOT", str(REPO / "manifests"))
    monkeypatch.setenv("TRAINER_MANIFESTS_DIR", str(trainer_tree))
    return Sources.from_env()


# -- cluster fixtures -------------------------------------------------------------------------

@pytest.fixture(scope="session")
def trainer_prerequisites(kube: KubeClient, crds: None, bin_dir: Path) -> None:
    """The Trainer CRD (via ``crds``), a PodMonitor API and the JobSet CRD."""
    apply_objects(kube, load("podmonitor-crd.yaml"))
    install_jobset_crd(kube, bin_dir)


def install_jobset_crd(kube: KubeClient, bin_dir: Path) -> None:
    """The JobSet CRD that ``hack/ensure-testbin.sh`` takes from the JobSet Go module."""
    files = sorted((bin_dir / "crds").rglob("*jobsets.yaml"))
    assert files, f"no JobSet CRD under {bin_dir / 'crds'}"
    apply_objects(kube, load_documents(files))


@pytest.fixture
def managed(kube: KubeClient, trainer_prerequisites: None, trainer_env: Sources,
            namespace: str) -> Iterator[Callable[..., Obj]]:
    """Creates the sample Trainer in the test's namespace; removes everything afterwards."""
    def create(**spec: Any) -> Obj:
        sample = yaml.safe_load((REPO / "config" / "samples" / "trainer.yaml").read_text())
        sample["spec"] = {**sample["spec"], "appNamespace": namespace, **spec}
        return kube.create(sample, res=resources.TRAINERS)

    yield create
    remove_trainer(kube)


def remove_trainer(kube: KubeClient) -> None:
    current = harness.trainer(kube)
    if current is not None:
        if not current["metadata"].get("deletionTimestamp"):
            kube.delete(resources.TRAINERS, current["metadata"]["name"])
        harness.gc(kube)
        harness.wait_until(lambda: harness.trainer(kube) is None, 30, "Trainer deletion")
    controller.cleanup(harness.context(kube, "gc"))

"""Fixtures of the Trainer tests: the kustomize binary and the manifest trees.

The upstream trainer manifests are read from ``../shared/upstream`` through the same fetch
script the image build uses (``hack/get_trainer_manifests.sh --from``); the runtimes and
ImageStreams are this repository's ``manifests/``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from functions.trainer.render import Sources

REPO = Path(__file__).resolve().parents[2]
UPSTREAM = Path(os.environ.get("SHARED_DIR", REPO.parent / "shared")) / "upstream"


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
def trainer_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("manifests") / "trainer"
    subprocess.run(["bash", str(REPO / "hack" / "get_trainer_manifests.sh"),
                    "--from", str(UPSTREAM / "trainer-manifests"), str(dest)],
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

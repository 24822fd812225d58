"""The CRDs install with plain ``kubectl apply`` as well as server-side: client-side apply
keeps the whole object in the ``last-applied-configuration`` annotation, and every annotation of
an object together may hold at most 256 KiB. The MPIJob CRD (both APIs' schemas in one) is the
largest: a margin is held here, so growth shows before an install breaks."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from devstack.cluster.runner import LocalCluster
from tests.deploy.support import REPO

ANNOTATIONS_LIMIT = 256 * 1024  # the API server's total for one object's annotations
MARGIN = 0.95
CRDS = sorted((REPO / "config" / "crd").glob("*.kubeflow.org.yaml")) + sorted(
    (REPO / "config" / "crd").glob("*.opendatahub.io.yaml"))


def applied_size(path: Path) -> int:
    """What client-side apply writes into the annotation: the object as compact JSON."""
    [crd] = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return len(json.dumps(crd, separators=(",", ":")))


@pytest.mark.parametrize("path", [pytest.param(p, id=p.name) for p in CRDS])
def test_a_crd_leaves_room_in_the_annotation_limit(path: Path) -> None:
    assert applied_size(path) <= MARGIN * ANNOTATIONS_LIMIT, (
        f"{path.name}: {applied_size(path)} bytes, over {MARGIN:.0%} of what client-side "
        "kubectl apply can store: shrink the schema (hack/gen_job_crds.py)")


@pytest.mark.parametrize("server_side", [pytest.param(False, id="client-side"),
                                         pytest.param(True, id="server-side")])
def test_kubectl_applies_the_crds(cluster: LocalCluster, bin_dir: Path, crds: None,
                                  server_side: bool) -> None:
    command = [str(bin_dir / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), "apply",
               "-k", str(REPO / "config" / "crd")]
    if server_side:
        command += ["--server-side", "--force-conflicts"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "mpijobs.kubeflow.org" in done.stdout

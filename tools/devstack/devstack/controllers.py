"""The upstream controllers the Trainer's workloads need, run for real by the local stack.

* The Kubeflow Trainer controller: the Trainer applies its upstream Deployment (image
  :data:`~devstack.core.podspec.TRAINER_IMAGE`), and the local kubelet runs the binary
  ``hack/ensure-testbin.sh`` builds from the same release (group ``trainer``) in its place,
  with the Deployment's arguments, environment and volumes and a token of its own
  ServiceAccount, so it acts with exactly the RBAC the Trainer rendered.
* JobSet, which the Trainer's manifests expect installed (a cluster admin's job, e.g. the Job
  Set Operator): its own install, the ``config/default`` of the module the ``jobset`` group
  builds, rendered with kustomize and the released image (as the manifests' third-party
  JobSet does), is applied; its Deployment is run the same way.

Both serve their admission webhooks on their pods' ports; the API server reaches them through
the cluster network (:mod:`devstack.podhost`), by their Services, as in a cluster. The
objects are applied as they are: none is changed to suit the local run.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

from devstack.cluster.manifests import apply_objects
from devstack.core.podspec import IMAGE_BINARIES, JOBSET_IMAGE
from functions.kube import resources
from functions.kube.client import KubeClient

Obj = dict[str, Any]
# hack/ensure-testbin.sh's optional groups of the upstream controllers
GROUPS = ("trainer", "jobset")
JOBSET_NAMESPACE = "jobset-system"
JOBSET_DEPLOYMENT = "jobset-controller-manager"
FIELD_MANAGER = "odh-training-dev-jobset"


def local_images(bin_dir: Path) -> tuple[str, ...]:
    """The images the local kubelet runs (kwok leaves them alone): those whose binary is in
    ``bin_dir``."""
    return tuple(image for image, binary in IMAGE_BINARIES.items()
                 if (bin_dir / binary).exists())


def jobset_objects(bin_dir: Path) -> list[Obj]:
    """JobSet's install as its release is made: ``config/default`` with the released image."""
    config = bin_dir / "jobset-config" / "default"
    if not (config / "kustomization.yaml").exists():
        raise FileNotFoundError(f"no JobSet install in {config}: the binaries lack the "
                                "jobset group (TESTBIN_EXTRA=jobset bash hack/ensure-testbin.sh)")
    name, tag = JOBSET_IMAGE.rsplit(":", 1)
    with tempfile.TemporaryDirectory(prefix="jobset-") as work:
        shutil.copytree(config.parent, Path(work) / "config")
        overlay = Path(work) / "release"
        overlay.mkdir()
        (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": ["../config/default"],
            "images": [{"name": "us-central1-docker.pkg.dev/k8s-staging-images/jobset/jobset",
                        "newName": name, "newTag": tag}]}))
        rendered = subprocess.run([str(bin_dir / "kustomize"), "build", str(overlay)],
                                  capture_output=True, text=True, check=True).stdout
    return [d for d in yaml.safe_load_all(rendered) if isinstance(d, dict)]


def install_jobset(kube: KubeClient, bin_dir: Path) -> None:
    apply_objects(kube, jobset_objects(bin_dir), FIELD_MANAGER)


def deployment_available(kube: KubeClient, namespace: str, name: str) -> bool:
    found = kube.get(resources.DEPLOYMENTS, name, namespace)
    conditions = ((found or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Available" and c.get("status") == "True" for c in conditions)

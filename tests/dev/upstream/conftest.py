"""The stack the upstream-controller tests share: ``python -m devstack dev``'s with the
upstream Trainer and JobSet controllers running for real (the local kubelet runs their
Deployments' pods, each with its own ServiceAccount's token), the functions under gunicorn
with their own identities, and the emulated event path in front of them (these tests are
about what the Trainer deploys, not about Knative), with no resync: what converges does so on
events. The API server writes an audit log, so a
request the upstream controllers were refused is seen whatever their logs say.

The binaries come from ``hack/ensure-testbin.sh`` (groups ``trainer`` and ``jobset``), built
on first use like every other one.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devstack import controllers
from devstack.cluster.binaries import ensure_bin_dir
from devstack.cluster.runner import LocalCluster
from devstack.stack import DevStack
from functions.kube import resources
from functions.kube.client import KubeClient
from functions.trainer.core.api import ManagementState
from tests.support import REPO, condition, wait_for

NAMESPACE = "opendatahub"
NUDGE = "tests.opendatahub.io/nudge"
NUDGE_EVERY_S = 30.0
TRAINER_DEPLOYMENT = "kubeflow-trainer-controller-manager"
# the identities the upstream controllers run as
CONTROLLER_USERS = {
    "trainer": f"system:serviceaccount:{NAMESPACE}:{TRAINER_DEPLOYMENT}",
    "jobset": f"system:serviceaccount:{controllers.JOBSET_NAMESPACE}:"
              f"{controllers.JOBSET_DEPLOYMENT}",
}


@pytest.fixture(scope="package")
def upstream_bin_dir(bin_dir: Path) -> Path:
    """The binaries with the upstream controllers (built by the script when missing)."""
    return ensure_bin_dir(controllers.GROUPS)


@pytest.fixture(scope="package")
def stack(upstream_bin_dir: Path, upstream_manifests: Path) -> Iterator[DevStack]:
    dev = DevStack(upstream_bin_dir, trainer_manifests=upstream_manifests, broker="emulated",
                   upstream_controllers=True, resync_interval=0,
                   cluster=LocalCluster(upstream_bin_dir, audit=True))
    started = time.monotonic()
    dev.start()
    print(f"stack with upstream controllers ready in {time.monotonic() - started:.1f}s: "
          f"{dev.timings}")
    try:
        yield dev
    except BaseException:
        assert dev.cluster is not None
        print(dev.cluster.logs_summary(60))
        raise
    finally:
        if dev.pods is not None and dev.pods.kubelet is not None:
            for pod in dev.pods.kubelet.snapshot():
                print(f"--- {pod.key} ---\n{tail(pod.log)}")
        dev.stop()


@pytest.fixture(scope="package")
def kube(stack: DevStack) -> KubeClient:
    assert stack.cluster is not None
    return stack.cluster.client()


def tail(path: Path, lines: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() \
        else "(no log)"


def set_management_state(kube: KubeClient, state: ManagementState, nudge: int = 0) -> None:
    """Apply the sample Trainer in ``state``; a different ``nudge`` changes an annotation, so
    the apply is a change the Trainer's source sends even when the state is the same."""
    sample = yaml.safe_load((REPO / "config" / "samples" / "trainer.yaml").read_text())
    sample["spec"]["managementState"] = state.value
    sample["metadata"].setdefault("annotations", {})[NUDGE] = str(nudge)
    kube.apply(sample, "tests-upstream")


@pytest.fixture
def managed(stack: DevStack, kube: KubeClient) -> DevStack:
    """The Trainer Managed and Ready, its upstream controller available and its webhook
    answering (quick when an earlier test left it so). The resync is off and an adapter's
    initial list sends nothing, so a Trainer applied before the Trainer source's watch started
    would never be seen: it is applied again, as a new change, until it is Ready."""
    def ready() -> bool:
        return condition(kube.get(resources.TRAINERS, "default-trainer"), "Ready").get(
            "status") == "True"

    deadline = time.monotonic() + 180
    for nudge in itertools.count():
        set_management_state(kube, ManagementState.MANAGED, nudge)
        try:
            wait_for(ready, min(NUDGE_EVERY_S, max(deadline - time.monotonic(), 0.0)), 1.0,
                     "the Trainer Ready")
            break
        except AssertionError:
            if time.monotonic() > deadline:
                raise
    wait_for(lambda: controllers.deployment_available(kube, NAMESPACE, TRAINER_DEPLOYMENT),
             120, 0.5, "the upstream Trainer controller available")
    wait_for(lambda: controllers.deployment_available(
        kube, controllers.JOBSET_NAMESPACE, controllers.JOBSET_DEPLOYMENT), 120, 0.5,
        "the JobSet controller available")
    return stack


def denials(stack: DevStack, user: str) -> list[str]:
    """Requests of ``user`` the API server refused with 403, from the audit log (which must
    show that ``user`` made requests at all)."""
    assert stack.cluster is not None
    found, seen = [], 0
    for line in stack.cluster.audit_log.read_text().splitlines():
        event: dict[str, Any] = json.loads(line)
        if (event.get("user") or {}).get("username") != user:
            continue
        seen += 1
        if (event.get("responseStatus") or {}).get("code") == 403:
            found.append(f"{event.get('verb')} {event.get('requestURI')}")
    assert seen, f"no request of {user} in the audit log"
    return found

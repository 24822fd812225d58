"""The guards' annotations are checked at admission by the ValidatingAdmissionPolicies of
config/crd/guards-policy.yaml (applied with the CRDs), on the real API server: a bad value is
refused with a message naming the annotation, a good one admitted, for every job kind, on
TrainJobs and on namespaces."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from devstack.cluster.manifests import apply_objects, load_documents
from functions.jobs.controller import RESOURCES
from functions.jobs.core import guards as g
from functions.jobs.core import hygiene as h
from functions.jobs.core.frameworks import FRAMEWORKS
from functions.kube import resources
from functions.kube.client import ApiError, KubeClient
from functions.kube.resources import Resource
from functions.trainer.core.api import CRD_FIELD_MANAGER
from tests.jobs.driver import for_test, sample

pytestmark = pytest.mark.cluster
Obj = dict[str, Any]
JOB_POLICY = "odh-training-job-guards"
HYGIENE_POLICY = "odh-training-trainjob-hygiene"


def _create(kube: KubeClient, obj: Obj, res: Resource, *, dry_run: bool = True) -> Obj:
    """Create ``obj`` (a dry run, unless told: admission runs all the same)."""
    if dry_run:
        return kube.apply(obj, "tests", res=res, dry_run=True)
    return kube.create(obj, res=res)


def _job(kind: str, namespace: str, annotations: dict[str, str]) -> Obj:
    job = for_test(sample(kind), f"guarded-{uuid.uuid4().hex[:6]}", namespace)
    job["metadata"]["annotations"] = annotations
    return job


@pytest.fixture(scope="module")
def policies(kube: KubeClient, crds: None) -> None:
    """The policies in force: the admission plugin picks a new policy and binding up a moment
    after they are stored, so wait until a known-bad job is refused."""
    deadline = time.monotonic() + 30
    while True:
        try:
            _create(kube, _job("PyTorchJob", "default", {g.RESTART_SCOPE: "Everything"}),
                    RESOURCES["PyTorchJob"])
        except ApiError as exc:
            if JOB_POLICY in exc.message:
                return
        if time.monotonic() > deadline:
            raise TimeoutError("the guards' admission policy is not in force")
        time.sleep(0.2)


BAD = [
    pytest.param({g.PENDING_TIMEOUT: "10 minutes"},
                 'training.opendatahub.io/pending-timeout: "10 minutes" is not a duration '
                 "above zero", id="timeout-not-a-duration"),
    pytest.param({g.PENDING_TIMEOUT: "0m"},
                 'training.opendatahub.io/pending-timeout: "0m" is not a duration above zero',
                 id="timeout-zero"),
    pytest.param({g.PENDING_TIMEOUT: "10m", g.PENDING_TIMEOUT_ACTION: "Requeue"},
                 'training.opendatahub.io/pending-timeout-action: "Requeue" is not one of '
                 "Fail, Suspend", id="unknown-action"),
    pytest.param({g.PENDING_TIMEOUT_ACTION: "Suspend"},
                 "training.opendatahub.io/pending-timeout-action needs "
                 "training.opendatahub.io/pending-timeout", id="action-without-timeout"),
    pytest.param({g.RESTART_SCOPE: "All"},
                 'training.opendatahub.io/restart-scope: "All" is not one of Pod, Job',
                 id="unknown-scope"),
    pytest.param({g.RESTART_LIMITS: "Worker:3"},
                 'training.opendatahub.io/restart-limits: "Worker:3" is not a list of '
                 "<replica type>=<restarts>", id="limits-malformed"),
    pytest.param({g.RESTART_LIMITS: "Worker=3,Wroker=1"},
                 "training.opendatahub.io/restart-limits: Wroker is not a replica type of "
                 "this job (", id="limits-unknown-type"),
]


@pytest.mark.parametrize("kind", [pytest.param(fw.kind, id=fw.kind.lower())
                                  for fw in FRAMEWORKS])
@pytest.mark.parametrize(("annotations", "message"), BAD)
def test_a_bad_annotation_is_refused(kube: KubeClient, policies: None, namespace: str,
                                     kind: str, annotations: dict[str, str],
                                     message: str) -> None:
    with pytest.raises(ApiError) as refused:
        _create(kube, _job(kind, namespace, annotations), RESOURCES[kind])
    assert refused.value.status == 422, refused.value
    assert message in refused.value.message
    assert JOB_POLICY in refused.value.message


GOOD = {g.PENDING_TIMEOUT: "1h30m", g.PENDING_TIMEOUT_ACTION: "Suspend",
        g.RESTART_SCOPE: "Job", g.RESTART_LIMITS: "worker=3"}


@pytest.mark.parametrize("kind", [pytest.param(fw.kind, id=fw.kind.lower())
                                  for fw in FRAMEWORKS])
def test_good_annotations_are_admitted(kube: KubeClient, policies: None, namespace: str,
                                       kind: str) -> None:
    created = _create(kube, _job(kind, namespace, GOOD), RESOURCES[kind], dry_run=False)
    assert created["metadata"]["annotations"] == GOOD


def test_an_update_is_checked_too(kube: KubeClient, policies: None, namespace: str) -> None:
    job = _create(kube, _job("TFJob", namespace, {}), RESOURCES["TFJob"], dry_run=False)
    with pytest.raises(ApiError) as refused:
        kube.patch(RESOURCES["TFJob"], job["metadata"]["name"],
                   {"metadata": {"annotations": {g.RESTART_LIMITS: "Chief=1"}}}, namespace)
    # the job's replica types, in the order CEL walks the spec's map (not a fixed one)
    _, found, listed = refused.value.message.partition("Chief is not a replica type of this "
                                                       "job (")
    assert found and sorted(listed.partition(")")[0].split(", ")) == ["PS", "Worker"]


@pytest.fixture(scope="module")
def trainjob_crd(kube: KubeClient, crds: None, upstream_manifests: Path) -> None:
    """The upstream TrainJob CRD under the field manager the Trainer applies it with: the
    session cluster is shared, and the Trainer's tests check who manages its CRDs."""
    apply_objects(kube, load_documents(
        [upstream_manifests / "base" / "crds" / "trainer.kubeflow.org_trainjobs.yaml"]),
        CRD_FIELD_MANAGER)


@pytest.mark.parametrize(("annotations", "message"), [
    pytest.param({h.TTL: "a day"}, 'training.opendatahub.io/ttl-after-finished: "a day" is '
                 "not a duration", id="ttl"),
    pytest.param({h.HISTORY_LIMIT: "-1"}, 'training.opendatahub.io/finished-history-limit: '
                 '"-1" is not a count of finished TrainJobs', id="history"),
    pytest.param({h.TTL: "0s", h.HISTORY_LIMIT: "0"}, None, id="zeros-admitted"),
])
@pytest.mark.parametrize("where", [pytest.param("trainjob", id="trainjob"),
                                   pytest.param("namespace", id="namespace")])
def test_the_trainjob_annotations_are_checked(kube: KubeClient, policies: None,
                                              trainjob_crd: None, namespace: str,
                                              where: str, annotations: dict[str, str],
                                              message: str | None) -> None:
    if where == "trainjob":
        obj: Obj = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                    "metadata": {"name": "t", "namespace": namespace,
                                 "annotations": annotations},
                    "spec": {"runtimeRef": {"name": "torch-distributed"}}}
        res = resources.TRAINJOBS
    else:
        obj = {"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": f"{namespace}-x", "annotations": annotations}}
        res = resources.NAMESPACES
    if message is None:
        _create(kube, obj, res)
        return
    with pytest.raises(ApiError) as refused:
        _create(kube, obj, res)
    assert refused.value.status == 422
    assert message in refused.value.message and HYGIENE_POLICY in refused.value.message


def test_the_annotated_sample_is_admitted(kube: KubeClient, policies: None,
                                          namespace: str) -> None:
    job = sample("pytorchjob-guards")
    job["metadata"]["namespace"] = namespace
    admitted = _create(kube, job, RESOURCES["PyTorchJob"])
    assert g.RESTART_SCOPE in admitted["metadata"]["annotations"]

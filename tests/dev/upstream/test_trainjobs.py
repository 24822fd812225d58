"""TrainJobs run by the real upstream controllers the Trainer deploys (``conftest.py``): the
Trainer's webhook admits or refuses them, its controller makes the JobSet, JobSet's
controller the Jobs, kube-controller-manager the pods (run by kwok), and the TrainJob
completes when they succeed; with the Trainer ``Removed`` its controller is gone and nothing
reconciles TrainJobs any more. Neither controller is ever refused a request (audit log)."""

from __future__ import annotations

import time
from typing import Any

import pytest
import yaml

from devstack.core.podspec import TRAINER_IMAGE
from devstack.stack import DevStack
from functions.api.core import queue
from functions.kube import resources
from functions.kube.client import ApiError, KubeClient
from functions.kube.resources import Resource
from functions.trainer.core.api import ManagementState
from tests.dev.upstream.conftest import (
    CONTROLLER_USERS,
    NAMESPACE,
    TRAINER_DEPLOYMENT,
    denials,
    set_management_state,
)
from tests.support import REPO, condition, wait_for

pytestmark = pytest.mark.cluster

Obj = dict[str, Any]
JOBSETS = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")
MUTATING = Resource("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
                    "MutatingWebhookConfiguration", namespaced=False)
VALIDATING = Resource("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations",
                      "ValidatingWebhookConfiguration", namespaced=False)
# the pods of every shipped runtime's one replicated job succeed at once (kwok)
SUCCEED = {"manager": "tests.opendatahub.io/kwok", "trainingRuntimeSpec": {"template": {
    "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {
        "metadata": {"labels": {"kwok.x-k8s.io/result": "succeed"}}}}}}]}}}}


def trainjob(name: str, namespace: str, runtime: str, **spec: Any) -> Obj:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"runtimeRef": {"name": runtime}, **spec}}


def controlled_by(obj: Obj, kind: str, name: str) -> bool:
    return any(o.get("kind") == kind and o.get("name") == name and o.get("controller")
               for o in obj["metadata"].get("ownerReferences") or [])


@pytest.mark.parametrize("runtime", [
    pytest.param("torch-distributed", id="torch-cuda"),
    pytest.param("torch-distributed-rocm", id="torch-rocm"),
    pytest.param("torch-distributed-cpu", id="torch-cpu"),
    pytest.param("training-hub", id="training-hub-cuda"),
    pytest.param("training-hub-rocm", id="training-hub-rocm"),
    pytest.param("training-hub-cpu", id="training-hub-cpu"),
])
def test_a_trainjob_runs_to_complete(managed: DevStack, kube: KubeClient, namespace: str,
                                     runtime: str) -> None:
    created = kube.create(trainjob("train", namespace, runtime, trainer={"numNodes": 2},
                                   runtimePatches=[SUCCEED]), res=resources.TRAINJOBS)
    # admitted by the real defaulting webhook: it stamps the time of each runtime patch
    assert created["spec"]["runtimePatches"][0].get("time"), created["spec"]
    jobset = wait_for(lambda: kube.get(JOBSETS, "train", namespace), 60, 0.2,
                      "the Trainer controller's JobSet")
    assert controlled_by(jobset, "TrainJob", "train")
    jobs = wait_for(lambda: kube.list(resources.JOBS, namespace), 60, 0.2,
                    "the JobSet controller's Jobs")
    assert all(controlled_by(job, "JobSet", "train") for job in jobs)
    pods = wait_for(lambda: kube.list(resources.PODS, namespace), 60, 0.2, "the Jobs' pods")
    assert {o["kind"] for p in pods for o in p["metadata"]["ownerReferences"]} == {"Job"}
    done = wait_for(lambda: condition(kube.get(resources.TRAINJOBS, "train", namespace),
                                      "Complete").get("status") == "True" and
                    kube.get(resources.TRAINJOBS, "train", namespace), 90, 0.5,
                    "the TrainJob Complete")
    assert len(kube.list(resources.PODS, namespace)) == 2, "one pod per node"
    assert [s["succeeded"] for s in done["status"]["jobsStatus"]] == [1]
    for who, user in CONTROLLER_USERS.items():
        assert denials(managed, user) == [], f"the {who} controller was refused"


@pytest.mark.parametrize("res", [pytest.param(MUTATING, id="mutating"),
                                 pytest.param(VALIDATING, id="validating")])
def test_the_webhooks_are_called_by_their_service_as_rendered(
        managed: DevStack, kube: KubeClient, res: Resource) -> None:
    """The local run changes nothing the Trainer applies: the API server calls the webhooks
    by the rendered Service, which the cluster network routes to the controller's pod."""
    [configuration] = [c for c in kube.list(res) if c["metadata"]["name"].endswith(
        ".trainer.kubeflow.org")]
    for webhook in configuration["webhooks"]:
        client = webhook["clientConfig"]
        assert "url" not in client
        assert (client["service"]["name"], client["service"]["namespace"]) == (
            TRAINER_DEPLOYMENT, NAMESPACE)
        assert client.get("caBundle"), "the controller's own certificate rotation set it"
    deployment = kube.get(resources.DEPLOYMENTS, TRAINER_DEPLOYMENT, NAMESPACE) or {}
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == TRAINER_IMAGE


def test_the_sample_trainjob_is_admitted_and_run(managed: DevStack, kube: KubeClient,
                                                 namespace: str) -> None:
    sample = yaml.safe_load((REPO / "config" / "samples" / "trainjob.yaml").read_text())
    sample["metadata"]["namespace"] = namespace
    kube.create(sample, res=resources.TRAINJOBS)
    name = sample["metadata"]["name"]
    wait_for(lambda: kube.get(JOBSETS, name, namespace), 60, 0.2, "the sample's JobSet")
    wait_for(lambda: len(kube.list(resources.PODS, namespace)) == 2, 60, 0.2,
             "a pod per node of the sample")


@pytest.mark.parametrize(("spec", "message"), [
    pytest.param({"runtimeRef": {"name": "torch-distributed"},
                  "trainer": {"env": [{"name": "PET_NNODES", "value": "3"}]}},
                 "must not have reserved envs, invalid envs configured: [PET_NNODES]",
                 id="reserved-torch-env"),
    pytest.param({"runtimeRef": {"name": "no-such-runtime"}},
                 "specified clusterTrainingRuntime must be created before the TrainJob is "
                 "created", id="missing-runtime"),
])
def test_the_webhook_refuses_a_trainjob_against_its_runtime(
        managed: DevStack, kube: KubeClient, namespace: str, spec: Obj, message: str) -> None:
    body = {**trainjob("refused", namespace, ""), "spec": spec}
    with pytest.raises(ApiError) as refused:
        kube.create(body, res=resources.TRAINJOBS)
    assert refused.value.status == 403
    assert 'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request' \
        in refused.value.message
    assert message in refused.value.message
    assert kube.get(resources.TRAINJOBS, "refused", namespace) is None


def queued(name: str, namespace: str, state: str = "Queued") -> Obj:
    """A TrainJob as the training API submits it: suspended, labelled with its queue state."""
    job = trainjob(name, namespace, "torch-distributed-cpu", suspend=True)
    job["metadata"]["labels"] = {queue.LABEL_QUEUE_STATE: state}
    return job


def test_a_queued_trainjob_is_admitted_on_its_event_once_its_source_is_added(
        managed: DevStack, kube: KubeClient, namespace: str) -> None:
    """The resync is off (``conftest.py``): without config/components/trainjobs nothing tells
    the queue of a queued TrainJob; once it is added, TrainJob events reach the reconcile
    function and the queue admits every queued TrainJob (a pass covers the whole queue)."""
    def suspended(name: str) -> bool:
        return bool((kube.get(resources.TRAINJOBS, name, namespace) or {})["spec"].get("suspend"))

    kube.create(queued("before", namespace), res=resources.TRAINJOBS)
    time.sleep(5)
    assert suspended("before"), "admitted with no TrainJob source and no resync"

    managed.add_event_sources(REPO / "config" / "components" / "trainjobs")
    router = managed.router
    assert router is not None
    probes = iter(range(1000))

    def probe_delivered() -> bool:
        """A TrainJob the queue leaves alone (its state is no queue's) reached the router: the
        new adapter's watch is up."""
        name = f"probe-{next(probes)}"
        kube.create(queued(name, namespace, state="Finished"), res=resources.TRAINJOBS)
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            if any(d.subject.endswith(f"/trainjobs/{name}") for d in list(router.deliveries)):
                return True
            time.sleep(0.1)
        return False

    wait_for(probe_delivered, 60, 0.1, "the TrainJobs' adapter to deliver")
    kube.create(queued("after", namespace), res=resources.TRAINJOBS)
    wait_for(lambda: not suspended("after") and not suspended("before"), 30, 0.2,
             "both queued TrainJobs admitted")
    labels = (kube.get(resources.TRAINJOBS, "after", namespace) or {})["metadata"]["labels"]
    assert labels[queue.LABEL_QUEUE_STATE] == "Admitted"
    assert suspended("probe-0")  # the queue admits only its own


def test_removed_stops_the_controller_and_trainjobs_are_not_reconciled(
        managed: DevStack, kube: KubeClient, namespace: str) -> None:
    kube.create(trainjob("held", namespace, "torch-distributed-cpu", suspend=True),
                res=resources.TRAINJOBS)
    wait_for(lambda: (kube.get(JOBSETS, "held", namespace) or {}).get("spec", {})
             .get("suspend"), 60, 0.2, "a suspended JobSet")
    assert managed.pods is not None and managed.pods.kubelet is not None
    kubelet = managed.pods.kubelet

    set_management_state(kube, ManagementState.REMOVED)
    wait_for(lambda: kube.get(resources.DEPLOYMENTS, TRAINER_DEPLOYMENT, NAMESPACE) is None,
             60, 0.5, "the upstream Deployment removed")
    wait_for(lambda: not [p for p in kubelet.snapshot() if p.key.startswith(
        f"{NAMESPACE}/{TRAINER_DEPLOYMENT}-")], 60, 0.5, "the controller's process gone")
    wait_for(lambda: kube.get(MUTATING, "defaulter.trainer.kubeflow.org") is None, 60, 0.5,
             "the upstream webhooks removed")
    kube.patch(resources.TRAINJOBS, "held", {"spec": {"suspend": False}}, namespace)
    kube.create(trainjob("late", namespace, "torch-distributed-cpu"), res=resources.TRAINJOBS)
    time.sleep(10)  # a controller would have acted within a second or two
    assert (kube.get(JOBSETS, "held", namespace) or {})["spec"]["suspend"] is True
    assert kube.get(JOBSETS, "late", namespace) is None
    assert not (kube.get(resources.TRAINJOBS, "late", namespace) or {}).get("status")

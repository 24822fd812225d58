"""Gang scheduling on the local cluster, with the real PodGroup CRDs of both flavours (Volcano's
``scheduling.volcano.sh/v1beta1`` and scheduler-plugins' ``scheduling.x-k8s.io/v1alpha1``).

No gang scheduler runs here: the PodGroup's admission is written onto it as Volcano's scheduler
would, and the decorated pods stay Pending (nothing schedules for their schedulerName)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack.cluster.manifests import apply_objects, load_documents
from functions.jobs import controller, reads
from functions.kube.client import KubeClient
from functions.kube.resources import Resource
from tests.jobs.driver import JobDriver, for_test, sample, specs_of
from tests.jobs.scrape import Samples, delta, scrape

pytestmark = pytest.mark.cluster
Obj = dict[str, Any]

VOLCANO = reads.PODGROUPS["scheduling.volcano.sh/v1beta1"]
PLUGINS = reads.PODGROUPS["scheduling.x-k8s.io/v1alpha1"]


@pytest.fixture(scope="module")
def podgroup_crds(kube: KubeClient, crds: None, bin_dir: Path) -> None:
    apply_objects(kube, load_documents([bin_dir / "crds" / "volcano",
                                        bin_dir / "crds" / "scheduler-plugins"]))


@pytest.fixture
def gang(monkeypatch: pytest.MonkeyPatch, podgroup_crds: None) -> Callable[[str], None]:
    """Switches the job handlers to a gang scheduler, as TRAINING_GANG_SCHEDULER does."""
    def use(scheduler: str) -> None:
        settings = dataclasses.replace(reads.SETTINGS, gang_scheduler=scheduler)
        monkeypatch.setattr(reads, "SETTINGS", settings)
        monkeypatch.setattr(controller, "SETTINGS", settings)
    monkeypatch.setattr(reads, "_served", {})
    return use


def start(kube: KubeClient, kind: str, name: str, namespace: str,
          policy: Obj) -> tuple[JobDriver, int]:
    """``kind`` names the sample (``MPIJob-v1``: the MPIJob written through kubeflow.org/v1)."""
    job = for_test(sample(kind), name, namespace)
    job["spec"]["runPolicy"]["schedulingPolicy"] = policy
    driver = JobDriver(kube, job)
    driver.create(job)
    return driver, sum(int(s.get("replicas", 1)) for s in specs_of(job).values())


def podgroup(driver: JobDriver, res: Resource) -> Obj | None:
    return driver.kube.get(res, driver.name, driver.namespace)


def podgroups_counted(before: Samples) -> tuple[float, float]:
    """PodGroups created and deleted since ``before``, by the upstream counters."""
    after, _ = scrape("reconcile")
    return (delta(after, before, "created_pod_groups_total"),
            delta(after, before, "deleted_pod_groups_total"))


def owned_by_job(obj: Obj, driver: JobDriver) -> bool:
    job = driver.get() or {}
    return [(r["kind"], r["name"], r["uid"], r.get("controller"))
            for r in obj["metadata"].get("ownerReferences") or []] == [
        (driver.kind, driver.name, job["metadata"]["uid"], True)]


# The v1 kinds name each pod's task (its replica type); mpi-operator names none.
@pytest.mark.parametrize(("kind", "min_resources", "task_spec"), [
    pytest.param("PyTorchJob", {"cpu": "200m", "memory": "536870912"}, True, id="pytorchjob"),
    pytest.param("TFJob", {"cpu": "300m", "memory": "805306368"}, True, id="tfjob"),
    pytest.param("MXJob", {"cpu": "300m", "memory": "536870912"}, True, id="mxjob"),
    pytest.param("XGBoostJob", {"cpu": "300m", "memory": "805306368"}, True, id="xgboostjob"),
    pytest.param("PaddleJob", {"cpu": "200m", "memory": "1073741824"}, True, id="paddlejob"),
    pytest.param("JAXJob", {"cpu": "200m", "memory": "536870912"}, True, id="jaxjob"),
    pytest.param("MPIJob", {"cpu": "300m", "memory": "201326592"}, False,
                 id="mpijob-launcher-and-workers"),
    pytest.param("MPIJob-v1", {"cpu": "300m", "memory": "201326592"}, True,
                 id="mpijob-v1-launcher-and-workers"),
])
def test_volcano_holds_pods_until_the_podgroup_is_inqueue(
        kube: KubeClient, namespace: str, gang: Callable[[str], None], kind: str,
        min_resources: dict[str, str], task_spec: bool) -> None:
    gang("volcano")
    before, _ = scrape("reconcile")
    driver, total = start(kube, kind, "gang", namespace,
                          {"queue": "research", "priorityClass": "high"})
    driver.run_until(lambda: podgroup(driver, VOLCANO), what="the Volcano PodGroup")
    for _ in range(3):
        driver.step()
    group = podgroup(driver, VOLCANO)
    assert group is not None and owned_by_job(group, driver)
    assert group["spec"] == {"minMember": total, "minResources": min_resources,
                             "queue": "research", "priorityClassName": "high"}
    assert driver.pods() == [], "no pod before Volcano admits the gang"
    assert podgroup(driver, PLUGINS) is None
    assert podgroups_counted(before) == (1, 0)

    # Volcano's scheduler writes the phase (its CRD has no status subresource).
    kube.patch(VOLCANO, "gang", {"status": {"phase": "Pending"}}, namespace)
    for _ in range(3):
        driver.step()
    assert driver.pods() == [], "Pending is not admitted"

    kube.patch(VOLCANO, "gang", {"status": {"phase": "Inqueue"}}, namespace)
    driver.run_until(lambda: len(driver.pods()) == total, what="pods once Inqueue")
    for pod in driver.pods():
        labels = pod["metadata"]["labels"]
        assert pod["spec"]["schedulerName"] == "volcano"
        annotations = pod["metadata"]["annotations"]
        assert annotations["scheduling.k8s.io/group-name"] == "gang"
        assert annotations.get("volcano.sh/task-spec") == (
            labels["training.kubeflow.org/replica-type"] if task_spec else None)
        assert pod["status"]["phase"] == "Pending"
    after = podgroup(driver, VOLCANO)
    assert after is not None and after["spec"]["queue"] == "research"


@pytest.mark.parametrize(("kind", "min_available", "replicas"), [
    pytest.param("PyTorchJob", 1, 2, id="pytorchjob"),
    pytest.param("XGBoostJob", 2, 3, id="xgboostjob"),
    pytest.param("PaddleJob", 2, 2, id="paddlejob"),
    pytest.param("JAXJob", 1, 2, id="jaxjob"),
    pytest.param("MPIJob", 3, 3, id="mpijob-launcher-and-workers"),
    pytest.param("MPIJob-v1", 3, 3, id="mpijob-v1-launcher-and-workers"),
])
def test_scheduler_plugins_podgroup_labels_and_suspend(
        kube: KubeClient, namespace: str, gang: Callable[[str], None], kind: str,
        min_available: int, replicas: int) -> None:
    gang("scheduler-plugins")
    before, _ = scrape("reconcile")
    driver, total = start(kube, kind, "coschedule", namespace, {
        "minAvailable": min_available, "minResources": {"cpu": "3", "nvidia.com/gpu": "2"},
        "scheduleTimeoutSeconds": 90, "queue": "ignored-without-volcano"})
    assert total == replicas
    driver.run_until(lambda: len(driver.pods()) == total, what="pods without waiting")
    group = podgroup(driver, PLUGINS)
    assert group is not None and owned_by_job(group, driver)
    assert group["spec"] == {"minMember": min_available,
                             "minResources": {"cpu": "3", "nvidia.com/gpu": "2"},
                             "scheduleTimeoutSeconds": 90}
    assert podgroup(driver, VOLCANO) is None
    for pod in driver.pods():
        assert pod["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
        assert pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "coschedule"
        assert "scheduling.k8s.io/group-name" not in (pod["metadata"].get("annotations") or {})

    kube.patch(driver.res, driver.name, {"spec": {"runPolicy": {"suspend": True}}},
               namespace)
    driver.run_until(lambda: podgroup(driver, PLUGINS) is None and not driver.live_pods(),
                     what="PodGroup and pods deleted on suspend")
    assert podgroups_counted(before) == (1, 1)


PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass",
                            namespaced=False)


@pytest.fixture
def priority_classes(kube: KubeClient, namespace: str,
                     monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """A high and a low PriorityClass of this test's own (they are cluster-scoped), read
    afresh by the handlers."""
    names = {"high": f"{namespace}-high", "low": f"{namespace}-low"}
    for key, value in (("high", 1000), ("low", -10)):
        kube.create({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                     "metadata": {"name": names[key]}, "value": value},
                    res=PRIORITY_CLASSES)
    monkeypatch.setattr(reads, "PRIORITIES", reads.Priorities())
    yield names
    for name in names.values():
        kube.delete(PRIORITY_CLASSES, name)


# For every kind (both MPIJob flavours): the last replica type (in the framework's order) is
# made the high-priority one, the others low, and its pods alone ask for a GPU, under limits
# only; minMember is that type's replica count, so minResources is its pods' alone.
@pytest.mark.parametrize("kind", [
    pytest.param(kind, id=kind.lower()) for kind in (
        "PyTorchJob", "TFJob", "MXJob", "XGBoostJob", "PaddleJob", "JAXJob", "MPIJob",
        "MPIJob-v1")])
def test_min_resources_take_gpu_limits_and_priority_order(
        kube: KubeClient, namespace: str, gang: Callable[[str], None],
        priority_classes: dict[str, str], kind: str) -> None:
    gang("scheduler-plugins")
    job = for_test(sample(kind), "prio", namespace)
    specs = specs_of(job)
    first = list(specs)[-1]
    for rtype, spec in specs.items():
        pod_spec = spec["template"]["spec"]
        pod_spec["priorityClassName"] = priority_classes["high" if rtype == first else "low"]
        if rtype == first:
            pod_spec["containers"][0]["resources"] = {
                "requests": {"cpu": "250m"}, "limits": {"cpu": "500m", "nvidia.com/gpu": "1"}}
    members = int(specs[first].get("replicas", 1))
    job["spec"]["runPolicy"]["schedulingPolicy"] = {"minAvailable": members}
    driver = JobDriver(kube, job)
    driver.create(job)
    group = driver.run_until(lambda: podgroup(driver, PLUGINS), what="the PodGroup")
    cpu = 250 * members
    assert group["spec"]["minResources"] == {
        "cpu": f"{cpu // 1000}" if cpu % 1000 == 0 else f"{cpu}m",
        "nvidia.com/gpu": str(members)}
    # the pods as created carry the class, and admission gave them its value
    driver.run_until(lambda: driver.pods(), what="pods")
    high = [p for p in driver.pods()
            if p["spec"].get("priorityClassName") == priority_classes["high"]]
    assert high and all(p["spec"]["priority"] == 1000 for p in high)

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from functions.jobs.core.defaults import with_defaults
from functions.jobs.core.objects import desired_pod, desired_service
from functions.jobs.core.plan import gc_may_act, gc_plan, reconcile_plan, status_of
from functions.jobs.core.planning import RESTARTS_ANNOTATION, Observed
from functions.jobs.core.pods import name_of
from functions.jobs.core.settings import Settings
from tests.jobs.fixtures import NOW, condition, job, pod, stamp

PT = "pytorch-master-workers.yaml"
CREATED = condition("Created", reason="PyTorchJobCreated")


def complete_children(file: str, **changes: Any) -> Observed:
    """A job whose pods (Running) and services all exist as the plan would create them."""
    j = job(file, **changes)
    d = with_defaults(j)
    pods, services = [], []
    for rtype in d.replica_specs:
        for i in range(d.replicas(rtype)):
            created, _ = desired_pod(d, rtype, i, Settings())
            created["metadata"]["uid"] = f"uid-{name_of(created)}"
            created["status"] = {"phase": "Running"}
            pods.append(created)
            services.append(desired_service(d, rtype, i))
    return Observed(job=j, pods=pods, services=services)


def names(objs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return sorted((o["kind"], name_of(o)) for o in objs)


def test_new_job_creates_every_pod_and_service() -> None:
    plan = reconcile_plan(Observed(job=job(PT)), NOW, Settings())
    expected = [(k, n) for n in ("mnist-master-0", "mnist-worker-0", "mnist-worker-1")
                for k in ("Pod", "Service")]
    assert names(plan.creates) == sorted(expected)
    assert plan.deletes == [] and plan.applies == [] and plan.restarts == []


def test_nothing_to_do_means_no_writes() -> None:
    plan = reconcile_plan(complete_children(PT), NOW, Settings())
    assert plan.empty
    assert plan.notices == []


def test_scale_down_deletes_out_of_range() -> None:
    observed = complete_children(PT)
    observed.job = job(PT, spec={"pytorchReplicaSpecs": {"Worker": {"replicas": 1}}})
    plan = reconcile_plan(observed, NOW, Settings())
    assert names(plan.deletes) == [("Pod", "mnist-worker-1"), ("Service", "mnist-worker-1")]
    assert plan.creates == []


def test_scale_up_creates_missing_only() -> None:
    observed = complete_children(PT)
    observed.job = job(PT, spec={"pytorchReplicaSpecs": {"Worker": {"replicas": 3}}})
    plan = reconcile_plan(observed, NOW, Settings())
    assert names(plan.creates) == [("Pod", "mnist-worker-2"), ("Service", "mnist-worker-2")]


def test_missing_pod_is_recreated_but_not_while_terminating() -> None:
    observed = complete_children(PT)
    observed.pods = [p for p in observed.pods if name_of(p) != "mnist-worker-1"]
    assert names(reconcile_plan(observed, NOW, Settings()).creates) == [
        ("Pod", "mnist-worker-1")]
    gone = complete_children(PT)
    gone.pods[-1]["metadata"]["deletionTimestamp"] = stamp()
    assert reconcile_plan(gone, NOW, Settings()).empty


@pytest.mark.parametrize(("persisted", "restarted"), [
    pytest.param([CREATED], False, id="waits-for-persisted-restarting"),
    pytest.param([CREATED, condition("Restarting", reason="TFJobRestarting")], True,
                 id="restarts-once-persisted"),
])
def test_exit_code_restart_waits_for_status(persisted: list[dict[str, str]],
                                            restarted: bool) -> None:
    file = "tfjob-chief-workers.yaml"
    observed = complete_children(file, status={"conditions": persisted})
    d = with_defaults(observed.job)
    observed.pods = [p for p in observed.pods if name_of(p) != "dist-mnist-worker-0"]
    observed.pods.append(pod(d, "Worker", 0, "Failed", exit_code=137))
    plan = reconcile_plan(observed, NOW, Settings())
    assert names(plan.restarts) == ([("Pod", "dist-mnist-worker-0")] if restarted else [])
    assert plan.creates == [] and plan.deletes == []


def test_permanent_failure_stops_creating() -> None:
    file = "tfjob-chief-workers.yaml"
    j = job(file)
    d = with_defaults(j)
    plan = reconcile_plan(Observed(job=j, pods=[pod(d, "Worker", 0, "Failed", exit_code=3)]),
                          NOW, Settings())
    assert plan.empty


def test_suspend_deletes_everything() -> None:
    observed = complete_children(PT, spec={"runPolicy": {"suspend": True}})
    plan = reconcile_plan(observed, NOW, Settings())
    assert len(plan.deletes) == 6
    assert plan.creates == []


def test_external_manager_gets_nothing() -> None:
    observed = Observed(job=job(PT, spec={"runPolicy": {"managedBy":
                                                        "kueue.x-k8s.io/multikueue"}}))
    assert reconcile_plan(observed, NOW, Settings()).empty
    assert status_of(observed, NOW) is None


def test_finished_job_creates_nothing() -> None:
    observed = Observed(job=job(PT, status={"conditions": [
        CREATED, condition("Succeeded", reason="PyTorchJobSucceeded")]}))
    assert reconcile_plan(observed, NOW, Settings()).empty


def test_elastic_job_gets_hpa() -> None:
    plan = reconcile_plan(Observed(job=job("pytorch-elastic.yaml")), NOW, Settings())
    hpa = next(o for o in plan.creates if o["kind"] == "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "kubeflow.org/v1",
                                             "kind": "PyTorchJob", "name": "elastic"}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 3)
    observed = complete_children("pytorch-elastic.yaml")
    observed.hpa = hpa
    assert reconcile_plan(observed, NOW, Settings()).empty
    observed.job = job("pytorch-elastic.yaml", spec={"elasticPolicy": {"maxReplicas": 5}})
    assert [o["spec"]["maxReplicas"] for o in reconcile_plan(observed, NOW,
                                                              Settings()).applies] == [5]


def test_gang_podgroup_and_volcano_wait() -> None:
    settings = Settings(gang_scheduler="volcano")
    observed = Observed(job=job(PT, spec={"runPolicy": {"schedulingPolicy": {
        "queue": "research", "minAvailable": 2}}}), podgroup_supported=True)
    plan = reconcile_plan(observed, NOW, settings)
    assert names(plan.creates) == [("PodGroup", "mnist")]
    assert plan.creates[0]["spec"] == {"minMember": 2, "queue": "research"}
    observed.podgroup = {**plan.creates[0], "status": {"phase": "Inqueue"}}
    assert len(reconcile_plan(observed, NOW, settings).creates) == 6
    observed.podgroup["spec"] = {**observed.podgroup["spec"], "queue": "chosen-by-volcano"}
    assert reconcile_plan(observed, NOW, settings).applies == []
    unsupported = Observed(job=job(PT), podgroup_supported=False)
    assert len(reconcile_plan(unsupported, NOW, settings).creates) == 6


def test_restart_counter_is_read_from_annotation() -> None:
    observed = Observed(job=job(PT, annotations={RESTARTS_ANNOTATION: "4"}))
    assert observed.restarts == 4


FINISHED = {"conditions": [CREATED, condition("Succeeded", reason="PyTorchJobSucceeded")],
            "completionTime": stamp(-30)}


@pytest.mark.parametrize(("policy", "phases", "deleted"), [
    pytest.param("All", ("Succeeded", "Running", "Failed"),
                 ["mnist-master-0", "mnist-worker-0", "mnist-worker-1"], id="all"),
    pytest.param("Running", ("Succeeded", "Running", "Pending"),
                 ["mnist-worker-0", "mnist-worker-1"], id="running-and-pending"),
    pytest.param("None", ("Succeeded", "Running", "Running"), [], id="none"),
])
def test_clean_pod_policy(policy: str, phases: tuple[str, ...], deleted: list[str]) -> None:
    observed = complete_children(PT, spec={"runPolicy": {"cleanPodPolicy": policy}},
                                 status=FINISHED)
    for p, phase in zip(observed.pods, phases, strict=True):
        p["status"]["phase"] = phase
    plan = gc_plan(observed, [], NOW)
    assert names(plan.deletes) == sorted([("Pod", n) for n in deleted]
                                         + [("Service", n) for n in deleted])
    assert not plan.delete_job


def test_clean_pod_policy_waits_for_persisted_finish() -> None:
    observed = complete_children(PT)
    observed.pods[0]["status"]["phase"] = "Succeeded"
    assert gc_plan(observed, [], NOW).empty


@pytest.mark.parametrize(("ttl", "delete", "requeue"), [
    pytest.param(30, True, None, id="expired"),
    pytest.param(0, True, None, id="zero"),
    pytest.param(90, False, 60.0, id="later"),
])
def test_ttl(ttl: int, delete: bool, requeue: float | None) -> None:
    observed = Observed(job=job(PT, spec={"runPolicy": {"ttlSecondsAfterFinished": ttl,
                                                        "cleanPodPolicy": "None"}},
                                status=FINISHED))
    plan = gc_plan(observed, [], NOW)
    assert plan.delete_job is delete
    assert plan.requeue_after == requeue
    assert gc_plan(observed, [], NOW - timedelta(seconds=60)).delete_job is False


def test_gc_deletes_orphans_of_a_gone_job() -> None:
    d = with_defaults(job(PT))
    orphans = [pod(d, "Master", 0), pod(d, "Worker", 0, deleting=True)]
    assert names(gc_plan(None, orphans, NOW).deletes) == [("Pod", "mnist-master-0")]


@pytest.mark.parametrize(("spec", "gang", "may_act"), [
    pytest.param({"cleanPodPolicy": "All"}, False, True, id="clean-all"),
    pytest.param({"cleanPodPolicy": "Running"}, False, True, id="clean-running"),
    pytest.param({"cleanPodPolicy": "None"}, False, False, id="nothing-to-do"),
    pytest.param({"cleanPodPolicy": "None", "ttlSecondsAfterFinished": 0}, False, True,
                 id="ttl"),
    pytest.param({"cleanPodPolicy": "None"}, True, True, id="podgroup"),
])
def test_gc_may_act(spec: dict[str, Any], gang: bool, may_act: bool) -> None:
    finished = job(PT, spec={"runPolicy": spec}, status=FINISHED)
    assert gc_may_act(finished, gang) is may_act
    if not may_act:  # and then gc_plan must indeed find nothing
        assert gc_plan(complete_children(PT, spec={"runPolicy": spec}, status=FINISHED), [],
                       NOW).empty

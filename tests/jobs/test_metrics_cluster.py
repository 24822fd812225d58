"""The upstream counters after a scripted run on the local cluster, read from each function's
``/metrics``: a PyTorchJob that succeeds and is deleted by its TTL, a JAXJob whose worker is
restarted once (exit code 137) and which then fails (exit code 3)."""

from __future__ import annotations

from typing import Any

import pytest

from functions.kube.client import KubeClient
from tests.jobs.driver import JobDriver, for_test, sample, specs_of
from tests.jobs.scrape import delta, scrape

pytestmark = pytest.mark.cluster
Obj = dict[str, Any]


def test_upstream_counters_after_a_scripted_run(kube: KubeClient, crds: None,
                                                namespace: str) -> None:
    before, _ = scrape("status")

    ok = for_test(sample("PyTorchJob"), "ok", namespace)
    ok["spec"]["runPolicy"].update({"ttlSecondsAfterFinished": 1, "cleanPodPolicy": "None"})
    first = JobDriver(kube, ok)
    first.create(ok)
    first.run_until(lambda: first.all_running(2), what="pytorch pods running")
    first.finish_pod("ok-master-0", "succeed")
    first.run_until(lambda: first.get() is None, what="succeeded and deleted by its TTL")

    flaky = for_test(sample("JAXJob"), "flaky", namespace)
    flaky["spec"]["runPolicy"]["cleanPodPolicy"] = "None"
    specs_of(flaky)["Worker"]["restartPolicy"] = "ExitCode"
    second = JobDriver(kube, flaky)
    second.create(flaky)
    second.run_until(lambda: second.all_running(2), what="jax pods running")
    victim = second.pod("flaky-worker-0")
    assert victim is not None
    second.finish_pod("flaky-worker-0", "fail", exit_code=137)

    def replaced() -> bool:
        pod = second.pod("flaky-worker-0")
        return bool(pod and pod["metadata"]["uid"] != victim["metadata"]["uid"]
                    and second.all_running(2) and second.condition("Running"))

    second.run_until(replaced, what="worker restarted")
    second.finish_pod("flaky-worker-1", "fail", exit_code=3)
    second.run_until(lambda: second.condition("Failed"), what="Failed")
    for _ in range(3):  # more passes, redeliveries as it were: nothing more is counted
        second.step()

    for function in ("reconcile", "gc", "status"):
        after, names = scrape(function)
        jobs = {(name, framework): delta(after, before, f"training_operator_jobs_{name}_total",
                                         job_namespace=namespace, framework=framework)
                for name in ("created", "successful", "failed", "restarted", "deleted")
                for framework in ("pytorch", "jax")}
        assert jobs == {
            ("created", "pytorch"): 1, ("successful", "pytorch"): 1, ("failed", "pytorch"): 0,
            ("restarted", "pytorch"): 0, ("deleted", "pytorch"): 1,
            ("created", "jax"): 1, ("successful", "jax"): 0, ("failed", "jax"): 1,
            ("restarted", "jax"): 1, ("deleted", "jax"): 0}, function
        pods = {name: delta(after, before, name) for name in (
            "created_pods_total", "deleted_pods_total", "failed_pods_total",
            "succeeded_service_creation_total", "failed_service_creation_total",
            "created_pod_groups_total", "deleted_pod_groups_total")}
        assert pods == {
            "created_pods_total": 5,            # 2 + 2, and the restarted worker's new pod
            "deleted_pods_total": 1,            # the restart (the TTL's deletion is the GC's)
            "failed_pods_total": 2,             # exit codes 137 and 3
            "succeeded_service_creation_total": 4,
            "failed_service_creation_total": 0,
            "created_pod_groups_total": 0, "deleted_pod_groups_total": 0}, function
        assert {"odh_training_events", "odh_training_handler_duration_seconds"} <= names, (
            "our own metrics are there too")

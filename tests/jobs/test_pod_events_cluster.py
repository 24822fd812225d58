"""Stuck pods on the local cluster: one Warning Event on the job per cause, visible to
``kubectl describe``. The scheduler really finds no node for a pod that asks for a label no
node has; the kubelet's image-pull and crash-loop states are written onto that (unbound, so
untouched by kwok) pod's status as a kubelet would."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from functions.kube import resources
from functions.kube.client import KubeClient
from tests.jobs.driver import JobDriver, for_test, sample, specs_of

pytestmark = pytest.mark.cluster
Obj = dict[str, Any]


def warnings(driver: JobDriver) -> list[tuple[str, str, int]]:
    items = driver.kube.list(resources.EVENTS, driver.namespace)
    return sorted((e["reason"], e["message"], int(e.get("count") or 1)) for e in items
                  if e["involvedObject"].get("name") == driver.name and e["type"] == "Warning")


def waiting(kube: KubeClient, namespace: str, pod: str, reason: str) -> None:
    status = {"containerStatuses": [{
        "name": "pytorch", "image": "docker.io/kubeflowkatib/pytorch-mnist-cpu:v1beta1-21320b6",
        "imageID": "", "ready": False, "restartCount": 3,
        "state": {"waiting": {"reason": reason, "message": f"{reason} for the test"}},
        "lastState": {"terminated": {"exitCode": 2, "reason": "Error",
                                     "startedAt": "2026-03-01T12:00:00Z",
                                     "finishedAt": "2026-03-01T12:00:01Z"}}}]}
    kube.patch(resources.PODS, pod, {"status": status}, namespace, subresource="status")


def test_one_warning_per_cause(cluster: Any, kube: KubeClient, crds: None,
                               namespace: str) -> None:
    job = for_test(sample("PyTorchJob"), "stuck", namespace)
    specs_of(job)["Worker"]["template"]["spec"]["nodeSelector"] = {
        "example.com/no-such-label": "anywhere"}
    driver = JobDriver(kube, job)
    driver.create(job)
    driver.run_until(lambda: any(r == "Unschedulable" for r, _, _ in warnings(driver)),
                     what="an Unschedulable warning")
    for _ in range(5):
        driver.step()
    [(reason, message, count)] = warnings(driver)
    assert (reason, count) == ("Unschedulable", 1)
    assert message.startswith("Pod stuck-worker-0 cannot be scheduled: 0/")

    waiting(kube, namespace, "stuck-worker-0", "ErrImagePull")
    driver.run_until(lambda: len(warnings(driver)) == 2, what="an image pull warning")
    waiting(kube, namespace, "stuck-worker-0", "ImagePullBackOff")  # the same cause
    for _ in range(3):
        driver.step()
    waiting(kube, namespace, "stuck-worker-0", "CrashLoopBackOff")
    driver.run_until(lambda: len(warnings(driver)) == 3, what="a crash-loop warning")
    for _ in range(3):
        driver.step()
    assert [(r, c) for r, _, c in warnings(driver)] == [
        ("CrashLoopBackOff", 1), ("ErrImagePull", 1), ("Unschedulable", 1)]

    described = subprocess.run(
        [str(cluster.bin_dir / "kubectl"), f"--kubeconfig={cluster.kubeconfig}", "describe",
         "pytorchjob", "stuck", "-n", namespace],
        capture_output=True, text=True, check=True).stdout
    flat = " ".join(described.split())
    assert "Warning Unschedulable" in flat
    assert 'container "pytorch" keeps crashing (last exit code 2), restarted 3 times' in flat

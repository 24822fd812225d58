"""A child's name taken by an object the job does not control, on the local cluster: the job
says so (ErrResourceExists) and leaves the object as it was."""

from __future__ import annotations

import pytest

from functions.kube import resources
from functions.kube.client import KubeClient
from tests.jobs.driver import JobDriver, for_test, sample

pytestmark = pytest.mark.cluster


def test_foreign_service_is_reported_and_left_alone(kube: KubeClient, crds: None,
                                                    namespace: str) -> None:
    foreign = kube.create({"apiVersion": "v1", "kind": "Service",
                           "metadata": {"name": "clash-worker-0", "namespace": namespace,
                                        "labels": {"app": "someone-else"}},
                           "spec": {"selector": {"app": "someone-else"},
                                    "ports": [{"name": "http", "port": 80}]}},
                          res=resources.SERVICES)
    job = for_test(sample("PyTorchJob"), "clash", namespace)
    driver = JobDriver(kube, job)
    driver.create(job)
    driver.run_until(lambda: driver.all_running(2), what="pods running")
    message = ('Resource "clash-worker-0" of Kind "Service" already exists and is not managed '
               "by PyTorchJob clash")
    driver.run_until(lambda: ("ErrResourceExists", message) in driver.events(),
                     what="ErrResourceExists")
    after = kube.get(resources.SERVICES, "clash-worker-0", namespace)
    assert after is not None
    assert after["metadata"]["uid"] == foreign["metadata"]["uid"]
    assert after["metadata"].get("ownerReferences") is None
    assert after["metadata"]["labels"] == {"app": "someone-else"}
    assert after["spec"]["selector"] == {"app": "someone-else"}
    assert [s["metadata"]["name"] for s in driver.services()] == ["clash-master-0"]

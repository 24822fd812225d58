"""Kubeflow Trainer v2 TrainJobs through the API and the CLI (served by gunicorn), against the
upstream TrainJob CRD: submitted suspended and queued, admitted by the queue handler clearing
``spec.suspend``, listed, watched while their status changes, deleted; bad requests are 4xx
problem documents.

No upstream Trainer controller runs here, so the tests write the TrainJob status the way that
controller does (child Jobs in ``jobsStatus``, then the ``Complete`` condition).
"""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import Any

import pytest
from flask.testing import FlaskClient

from functions.api import queue_controller
from functions.core.keys import ObjectKey
from functions.kube import resources
from functions.kube.client import KubeClient
from functions.kube.resources import Resource
from functions.runtime.dispatch import Dispatcher
from functions.runtime.registry import Context
from tests.api.conftest import QueueWorld, cli, job_request
from tests.support import REPO, wait_for

Obj = dict[str, Any]
IMAGE = "example.com/train:1"
TIME = "2026-12-01T00:00:00Z"


def trainjob_request(name: str, **extra: Any) -> Obj:
    return {"name": name, "runtime": "torch-distributed", "image": IMAGE, **extra}


def admit(world: QueueWorld, name: str, res: Resource = resources.TRAINJOBS) -> None:
    """One pass of the queue handler, as an event about job ``name`` of ``res`` starts it."""
    key = ObjectKey(res.api_version, res.kind, world.namespace, name)
    queue_controller.admit(Context(world.kube, world.recorder, "reconcile"), key)


def set_status(kube: KubeClient, namespace: str, name: str, status: Obj) -> None:
    """What the upstream Trainer controller would write (no such controller runs here)."""
    kube.apply_status({"apiVersion": resources.TRAINJOBS.api_version, "kind": "TrainJob",
                       "metadata": {"name": name, "namespace": namespace}, "status": status},
                      "test-trainer-controller", res=resources.TRAINJOBS)


def node_jobs(active: int, succeeded: int) -> list[Obj]:
    return [{"name": "node", "active": active, "ready": active, "succeeded": succeeded,
             "failed": 0, "suspended": 0}]


def condition(type_: str, reason: str) -> Obj:
    return {"type": type_, "status": "True", "reason": reason, "message": reason,
            "lastTransitionTime": TIME}


class Lines:
    """The output of a process, line by line, as it comes."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(process,), daemon=True)
        self._thread.start()

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.lines.append(line.rstrip("\n"))

    def seen(self, text: str) -> bool:
        return any(text in line for line in list(self.lines))


def test_trainjobs_are_queued_admitted_watched_and_deleted(
        client: FlaskClient, user: dict[str, str], namespace: str, kube: KubeClient,
        trainer_crds: None, world: QueueWorld, served_api: str,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINING_QUEUE_MAX_RUNNING_PER_NAMESPACE", "1")
    token = user["Authorization"].split(" ", 1)[1]
    flags = ["--url", served_api, "--token", token, "-n", namespace]
    base = f"/v1/namespaces/{namespace}/jobs"

    code, out, err = cli(capsys, "submit", "llm", "--runtime", "torch-distributed",
                         "--image", IMAGE, "--nodes", "2", "--gpus", "1", "--cpu", "1",
                         "--env", "EPOCHS=1", *flags, "--command", "torchrun", "train.py")
    assert (code, out.strip()) == (0, "TrainJob llm submitted: Queued (queue position 1)"), err
    second = client.post(base, json=trainjob_request("second", framework="trainjob"),
                         headers=user)
    assert second.status_code == 201, second.get_json()
    assert (second.get_json()["kind"], second.get_json()["queue"]["position"]) == (
        "TrainJob", 2)

    cr = kube.get(resources.TRAINJOBS, "llm", namespace)
    assert cr is not None
    assert cr["spec"]["suspend"] is True
    assert cr["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org",
                                        "kind": "ClusterTrainingRuntime",
                                        "name": "torch-distributed"}
    assert cr["spec"]["trainer"] == {
        "image": IMAGE, "numNodes": 2, "command": ["torchrun", "train.py"],
        "env": [{"name": "EPOCHS", "value": "1"}],
        "resourcesPerNode": {"requests": {"cpu": "1", "nvidia.com/gpu": 1},
                             "limits": {"nvidia.com/gpu": 1}}}

    # One running job per namespace: the queue admits the first by clearing spec.suspend.
    admit(world, "llm")
    llm = kube.get(resources.TRAINJOBS, "llm", namespace)
    waiting = kube.get(resources.TRAINJOBS, "second", namespace)
    assert llm is not None and waiting is not None
    assert llm["spec"]["suspend"] is False
    assert llm["metadata"]["labels"]["training.opendatahub.io/queue-state"] == "Admitted"
    assert waiting["spec"]["suspend"] is True
    code, out, _ = cli(capsys, "list", *flags)
    rows = {line.split()[0]: line.split()[1:4] for line in out.splitlines()[1:]}
    assert code == 0 and rows == {"llm": ["trainjob", "Pending", "-"],
                                  "second": ["trainjob", "Queued", "#1"]}

    watch = subprocess.Popen(
        [sys.executable, "-m", "functions", "jobs", "watch", "llm", *flags, "--plain",
         "--interval", "0.1", "--timeout", "60"], cwd=REPO, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        lines = Lines(watch)
        wait_for(lambda: lines.seen("llm  TrainJob  Pending"), 30, message="Pending")
        set_status(kube, namespace, "llm", {"jobsStatus": node_jobs(active=1, succeeded=0)})
        wait_for(lambda: lines.seen("llm  TrainJob  Running"), 30, message="Running")
        set_status(kube, namespace, "llm", {
            "jobsStatus": node_jobs(active=0, succeeded=1),
            "conditions": [condition("Complete", "JobsCompleted")]})
        assert watch.wait(timeout=30) == 0
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    states = [state for state in ("Pending", "Running", "Succeeded")
              if lines.seen(f"llm  TrainJob  {state}")]
    assert states == ["Pending", "Running", "Succeeded"]
    assert lines.seen("1/1 finished")
    assert lines.seen("- Complete=True JobsCompleted")

    done = client.get(f"{base}/llm", headers=user).get_json()
    assert (done["state"], done["framework"]) == ("Succeeded", "trainjob")
    assert done["replicas"] == {"node": {"desired": 1, "active": 0, "succeeded": 1,
                                         "failed": 0}}
    # The finished TrainJob no longer counts: the next pass admits the one behind it, here
    # a pass started by an event about another kind of job (a PyTorchJob deleted).
    admit(world, "gone", resources.PYTORCHJOBS)
    waiting = kube.get(resources.TRAINJOBS, "second", namespace)
    assert waiting is not None and waiting["spec"]["suspend"] is False
    finished = kube.get(resources.TRAINJOBS, "llm", namespace)
    assert finished is not None
    assert finished["metadata"]["labels"]["training.opendatahub.io/queue-state"] == "Finished"

    code, out, _ = cli(capsys, "delete", "llm", *flags)
    assert (code, out.strip()) == (0, "llm deleted")
    assert client.delete(f"{base}/second", headers=user).status_code == 204
    assert client.get(f"{base}/llm", headers=user).status_code == 404
    wait_for(lambda: kube.list(resources.TRAINJOBS, namespace) == [], 30,
             message="the TrainJobs to be gone")
    code, _, err = cli(capsys, "get", "llm", *flags)
    assert code == 1 and "404" in err


def test_the_resync_tick_admits_a_queued_trainjob(
        client: FlaskClient, user: dict[str, str], namespace: str, kube: KubeClient,
        trainer_crds: None, world: QueueWorld) -> None:
    """No ApiServerSource watches TrainJobs: the reconcile function's resync lists them and
    the queue handler admits them."""
    base = f"/v1/namespaces/{namespace}/jobs"
    assert client.post(base, json=trainjob_request("llm"), headers=user).status_code == 201
    reconcile = Dispatcher("reconcile", queue_controller.CONTROLLERS, lambda: kube,
                           lambda: world.recorder)
    assert reconcile.resync().kind == "ok"
    admitted = kube.get(resources.TRAINJOBS, "llm", namespace)
    assert admitted is not None and admitted["spec"]["suspend"] is False
    assert client.get(f"{base}/llm", headers=user).get_json()["state"] == "Pending"


def test_logs_of_a_trainjob_come_from_its_trainer_node_pods(
        client: FlaskClient, user: dict[str, str], namespace: str, kube: KubeClient,
        trainer_crds: None) -> None:
    """The pod of node 0 is found by the JobSet's labels (created here as the JobSet
    controller would); kwok serves no logs, so the API server's failure is a 502 naming it."""
    base = f"/v1/namespaces/{namespace}/jobs"
    assert client.post(base, json=trainjob_request("llm"), headers=user).status_code == 201
    kube.create({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "llm-node-0-0-abcde", "namespace": namespace,
        "labels": {"jobset.sigs.k8s.io/jobset-name": "llm",
                   "jobset.sigs.k8s.io/replicatedjob-name": "node",
                   "batch.kubernetes.io/job-completion-index": "0"}},
        "spec": {"nodeName": "kwok-cpu-0",
                 "containers": [{"name": "node", "image": IMAGE}]}}, res=resources.PODS)
    logs = client.get(f"{base}/llm/logs", headers=user)
    assert logs.status_code == 502 and logs.mimetype == "application/problem+json"
    assert "llm-node-0-0-abcde" in logs.get_json()["detail"]
    missing = client.get(f"{base}/llm/logs?index=1", headers=user)
    assert missing.status_code == 404
    assert missing.get_json()["errors"][0]["field"] == "replica"
    assert "no node pod 1" in missing.get_json()["detail"]


@pytest.mark.parametrize(("body", "status", "field"), [
    pytest.param(trainjob_request("nope", runtime="no-such-runtime"), 422, "runtime",
                 id="unknown-runtime"),
    pytest.param({"name": "nope", "framework": "trainjob", "image": IMAGE}, 422, "runtime",
                 id="no-runtime"),
    pytest.param(trainjob_request("nope", numNodes=0), 422, "numNodes", id="zero-nodes"),
    pytest.param(trainjob_request("nope", workers=2), 422, "workers", id="workers"),
    pytest.param(trainjob_request("nope", framework="pytorch"), 422, "runtime",
                 id="runtime-on-a-v1-kind"),
    pytest.param(trainjob_request("nope", image="x" * 505), 422, "spec.trainer.image",
                 id="image-longer-than-the-crd-allows"),
    pytest.param(trainjob_request("taken"), 409, "name", id="name-of-another-kind"),
])
def test_bad_trainjob_requests_are_problems_naming_the_field(
        client: FlaskClient, user: dict[str, str], namespace: str, kube: KubeClient,
        trainer_crds: None, body: Obj, status: int, field: str) -> None:
    base = f"/v1/namespaces/{namespace}/jobs"
    assert client.post(base, json=job_request("taken"), headers=user).status_code == 201
    answer = client.post(base, json=body, headers=user)
    assert answer.status_code == status, answer.get_json()
    assert answer.mimetype == "application/problem+json"
    assert field in [e["field"] for e in answer.get_json()["errors"]]
    assert kube.list(resources.TRAINJOBS, namespace) == []


def test_cli_reports_an_unknown_runtime(
        user: dict[str, str], namespace: str, kube: KubeClient, trainer_crds: None,
        served_api: str, capsys: pytest.CaptureFixture[str]) -> None:
    token = user["Authorization"].split(" ", 1)[1]
    code, _, err = cli(capsys, "submit", "llm", "--runtime", "torch-distributd", "--image",
                       IMAGE, "--url", served_api, "--token", token, "-n", namespace)
    assert code == 1
    assert "422" in err and "runtime: no ClusterTrainingRuntime named torch-distributd" in err
    assert kube.list(resources.TRAINJOBS, namespace) == []

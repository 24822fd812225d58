"""Submit → CR created suspended → admitted → pods → Succeeded, through the API and the CLI
(served by gunicorn), with the job controllers and the queue handler driven as events would."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient

from functions.kube import resources
from functions.kube.client import KubeClient
from tests.api.conftest import QueueWorld, cli, job_request

Obj = dict[str, Any]
def test_submit_runs_to_success_through_api_and_cli(
        client: FlaskClient, user: dict[str, str], namespace: str, kube: KubeClient,
        world: QueueWorld, served_api: str, capsys: pytest.CaptureFixture[str]) -> None:
    base = f"/v1/namespaces/{namespace}/jobs"
    created = client.post(base, json=job_request("mnist", workers=2), headers=user)
    assert created.status_code == 201, created.get_json()
    assert created.headers["Location"] == f"{base}/mnist"
    body = created.get_json()
    assert (body["state"], body["queue"]["position"], body["queue"]["admission"]) == (
        "Queued", 1, "queue")

    cr = kube.get(resources.PYTORCHJOBS, "mnist", namespace)
    assert cr is not None and cr["spec"]["runPolicy"]["suspend"] is True
    assert cr["metadata"]["annotations"]["training.opendatahub.io/submitted-by"] == (
        f"system:serviceaccount:{namespace}:alice")
    assert kube.list(resources.PODS, namespace) == []

    token = user["Authorization"].split(" ", 1)[1]
    flags = ["--url", served_api, "--token", token, "-n", namespace]
    code, out, _ = cli(capsys, "get", "mnist", *flags, "-o", "json")
    assert code == 0 and '"state": "Queued"' in out

    states: list[str] = []

    def seen(jobs: list[Obj]) -> None:
        state = client.get(f"{base}/mnist", headers=user).get_json()["state"]
        if not states or states[-1] != state:
            states.append(state)

    world.run_until(lambda jobs: states[-1:] == ["Succeeded"], on_step=seen)
    assert states[0] in ("Queued", "Pending", "Running")
    assert "Running" in states
    final = client.get(f"{base}/mnist", headers=user).get_json()
    assert final["replicas"] == {"Master": {"desired": 1, "active": 0, "succeeded": 1,
                                            "failed": 0},
                                 "Worker": {"desired": 1, "active": 0, "succeeded": 1,
                                            "failed": 0}}
    assert final["startTime"] and final["completionTime"] and final["queue"]["admittedAt"]
    assert [c["type"] for c in final["conditions"]][-1] == "Succeeded"
    pods = kube.list(resources.PODS, namespace)
    assert sorted(p["metadata"]["name"] for p in pods) == ["mnist-master-0", "mnist-worker-0"]

    code, out, _ = cli(capsys, "list", *flags)
    assert code == 0 and out.splitlines()[1].split()[:3] == ["mnist", "pytorch", "Succeeded"]
    code, out, _ = cli(capsys, "watch", "mnist", *flags, "--plain", "--interval", "0.1")
    assert code == 0 and "1/1 finished" in out and "Master" in out

    events = client.get(f"{base}/mnist/events", headers=user).get_json()["items"]
    reasons = [e["reason"] for e in events]
    assert {"Admitted", "SuccessfulCreatePod", "PyTorchJobSucceeded"} <= set(reasons)

    # No kubelet here: kwok plays the nodes and serves no logs, so the API server cannot
    # fetch them. The API says so instead of pretending (and the CLI reports the problem).
    logs = client.get(f"{base}/mnist/logs", headers=user)
    assert logs.status_code == 502 and logs.mimetype == "application/problem+json"
    assert "mnist-master-0" in logs.get_json()["detail"]
    assert "kubelet" in logs.get_json()["detail"]
    followed = client.get(f"{base}/mnist/logs?follow=true&replica=worker", headers=user)
    assert followed.status_code == 502 and "mnist-worker-0" in followed.get_json()["detail"]
    code, _, err = cli(capsys, "logs", "mnist", *flags)
    assert code == 1 and "502" in err
    missing = client.get(f"{base}/mnist/logs?replica=worker&index=5", headers=user)
    assert missing.status_code == 404 and missing.get_json()["errors"][0]["field"] == "replica"

    code, out, _ = cli(capsys, "delete", "mnist", *flags)
    assert code == 0
    assert client.get(f"{base}/mnist", headers=user).status_code == 404
    code, _, err = cli(capsys, "get", "mnist", *flags)
    assert code == 1 and "404" in err


def test_cli_submit_and_list_paginate(client: FlaskClient, user: dict[str, str],
                                      namespace: str, served_api: str, kube: KubeClient,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    token = user["Authorization"].split(" ", 1)[1]
    flags = ["--url", served_api, "--token", token, "-n", namespace]
    for index, framework in enumerate(("pytorch", "tensorflow", "mpi", "mxnet", "pytorch")):
        code, out, err = cli(capsys, "submit", f"job-{index}", "--framework", framework,
                             "--image", "img:1", "--workers", "2", "--priority", str(index),
                             "--env", "EPOCHS=1", *flags, "--command", "python", "t.py",
                             "--arg=--epochs=1")
        assert code == 0, err
        assert "submitted: Queued" in out
    submitted = kube.get(resources.TFJOBS, "job-1", namespace)
    assert submitted is not None
    container = submitted["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert (container["command"], container["args"], container["env"]) == (
        ["python", "t.py"], ["--epochs=1"], [{"name": "EPOCHS", "value": "1"}])
    code, _, err = cli(capsys, "submit", "bad", "--image", "img", "--workers", "-3", *flags)
    assert code == 1 and "workers" in err

    base = f"/v1/namespaces/{namespace}/jobs"
    seen: list[str] = []
    token_param = ""
    pages = 0
    while True:
        page = client.get(f"{base}?limit=2{token_param}", headers=user).get_json()
        assert len(page["items"]) <= 2
        seen.extend(f"{i['kind']}/{i['name']}" for i in page["items"])
        pages += 1
        if not page["continue"]:
            break
        token_param = f"&continue={page['continue']}"
    assert sorted(seen) == ["MPIJob/job-2", "MXJob/job-3", "PyTorchJob/job-0",
                            "PyTorchJob/job-4", "TFJob/job-1"]
    assert pages >= 3
    positions = {i["name"]: i["queue"]["position"] for i in client.get(
        f"{base}?state=Queued", headers=user).get_json()["items"]}
    assert positions == {"job-4": 1, "job-3": 2, "job-2": 3, "job-1": 4, "job-0": 5}
    assert client.get(f"{base}?state=Running", headers=user).get_json()["items"] == []
    labelled = client.get(f"{base}?labelSelector=training.opendatahub.io/queue-state%3DQueued"
                          "&limit=500", headers=user).get_json()
    assert len(labelled["items"]) == 5
    bad = client.get(f"{base}?labelSelector=%3D%3D%3D", headers=user)
    assert bad.status_code == 400 and bad.get_json()["errors"][0]["field"] == "labelSelector"
    forged = client.get(f"{base}?continue=forged", headers=user)
    assert forged.status_code == 400 and forged.get_json()["errors"][0]["field"] == "continue"


def test_stuck_pod_warning_in_the_job_events(client: FlaskClient, user: dict[str, str],
                                             namespace: str, world: QueueWorld) -> None:
    """A job no node can take: its Unschedulable pod shows as one Warning in ``/events``."""
    base = f"/v1/namespaces/{namespace}/jobs"
    request = job_request("greedy", framework="jax",
                          resources={"cpu": "100m", "memory": "64Mi", "gpus": 64})
    assert client.post(base, json=request, headers=user).status_code == 201

    def warned(jobs: list[Obj]) -> bool:
        items = client.get(f"{base}/greedy/events", headers=user).get_json()["items"]
        return any(e["type"] == "Warning" and e["reason"] == "Unschedulable" for e in items)

    world.run_until(warned)
    for _ in range(3):
        world.step()
    items = client.get(f"{base}/greedy/events", headers=user).get_json()["items"]
    [warning] = [e for e in items if e["type"] == "Warning"]
    assert warning["reason"] == "Unschedulable" and warning["count"] == 1
    assert warning["message"].startswith("Pod greedy-worker-0 cannot be scheduled: ")
    assert "nvidia.com/gpu" in warning["message"]

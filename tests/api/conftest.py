"""Fixtures of the training-API tests: the app against the local cluster (in process, and
served by gunicorn for the CLI), users with tokens, the Trainer's CRDs, and a driver that
plays the queue handler and the job controllers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from devstack.cluster.manifests import apply_objects, load_documents
from devstack.cluster.ports import free_port
from devstack.cluster.runner import LocalCluster
from functions.__main__ import main
from functions.api import queue_controller
from functions.api.app import create_api_app
from functions.api.core.policy import CONFIGMAP
from functions.api.policy import PolicySource
from functions.core.keys import ObjectKey
from functions.jobs.controller import RESOURCES
from functions.jobs.core.frameworks import FRAMEWORKS
from functions.kube import resources
from functions.kube.client import KubeClient
from functions.kube.resources import Resource
from functions.runtime.recorder import EventRecorder
from functions.runtime.registry import Context
from functions.trainer.core.api import CRD_FIELD_MANAGER
from functions.trainer.core.api import FIELD_MANAGER as TRAINER_FIELD_MANAGER
from tests.jobs.driver import JobDriver
from tests.support import REPO, wait_for

Obj = dict[str, Any]
POLICY_NAMESPACE = "platform-policy"
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLEBINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
JOB_RULES = [
    {"apiGroups": ["kubeflow.org"], "resources": [fw.plural for fw in FRAMEWORKS],
     "verbs": ["create", "get", "list", "delete"]},
    {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"],
     "verbs": ["create", "get", "list", "delete"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
]


def mint_token(kube: KubeClient, namespace: str, account: str) -> str:
    """A ServiceAccount (created if needed) and a token for it from the TokenRequest API."""
    kube.create({"apiVersion": "v1", "kind": "ServiceAccount",
                 "metadata": {"name": account, "namespace": namespace}},
                res=resources.SERVICEACCOUNTS) if kube.get(
        resources.SERVICEACCOUNTS, account, namespace) is None else None
    answer = kube.call("create", "POST",
                       resources.SERVICEACCOUNTS.path(namespace, account, "token"),
                       body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                             "spec": {"expirationSeconds": 3600}})
    assert answer.status == 201, answer.body
    import json

    return str(json.loads(answer.body)["status"]["token"])


def grant(kube: KubeClient, namespace: str, account_namespace: str, account: str,
          rules: list[Obj] | None = None) -> None:
    """Let ``account`` use training jobs in ``namespace`` (a Role and a RoleBinding)."""
    name = f"training-{account}"
    kube.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                 "metadata": {"name": name, "namespace": namespace},
                 "rules": rules or JOB_RULES}, res=ROLES)
    kube.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                 "metadata": {"name": name, "namespace": namespace},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                             "name": name},
                 "subjects": [{"kind": "ServiceAccount", "name": account,
                               "namespace": account_namespace}]}, res=ROLEBINDINGS)


def wait_allowed(client: FlaskClient, namespace: str, token: str) -> None:
    """RBAC changes reach the authorizer's cache within moments; wait for them."""
    deadline = time.monotonic() + 10
    while client.get(f"/v1/namespaces/{namespace}/jobs",
                     headers={"Authorization": f"Bearer {token}"}).status_code != 200:
        assert time.monotonic() < deadline, "the RoleBinding never took effect"
        time.sleep(0.2)


@pytest.fixture
def trainer_crds(kube: KubeClient, upstream_manifests: Path) -> None:
    """The upstream TrainJob and runtime CRDs and the upstream torch-distributed
    ClusterTrainingRuntime (applied per test: other tests delete the Trainer's CRDs), under
    the field managers the Trainer applies them with, as a Trainer would have installed them:
    the session cluster is shared, and the Trainer's tests check who manages these objects."""
    documents = load_documents([
        upstream_manifests / "base" / "crds",
        upstream_manifests / "base" / "runtimes" / "torch_distributed.yaml"])
    crds = [d for d in documents if d["kind"] == "CustomResourceDefinition"]
    apply_objects(kube, crds, CRD_FIELD_MANAGER)
    apply_objects(kube, [d for d in documents if d not in crds], TRAINER_FIELD_MANAGER)


@pytest.fixture
def app(cluster: LocalCluster, crds: None) -> Flask:
    """The API against the local cluster, re-reading the priority policy on every request."""
    api = create_api_app(kube_factory=cluster.client)
    api.extensions["functions.api"].policy.ttl = 0.0
    return api


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture
def user(kube: KubeClient, namespace: str, client: FlaskClient) -> dict[str, str]:
    """Bearer headers of a ServiceAccount allowed to use training jobs in ``namespace``."""
    token = mint_token(kube, namespace, "alice")
    grant(kube, namespace, namespace, "alice")
    wait_allowed(client, namespace, token)
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def other_namespace(kube: KubeClient) -> Iterator[str]:
    name = f"other-{uuid.uuid4().hex[:8]}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
                res=resources.NAMESPACES)
    yield name
    kube.delete(resources.NAMESPACES, name)


def job_request(name: str, **extra: Any) -> Obj:
    """A small PyTorch request whose pods kwok finishes successfully."""
    body: Obj = {"name": name, "framework": "pytorch", "image": "example.com/train:1",
                 "command": ["python", "train.py"], "workers": 1,
                 "resources": {"cpu": "100m", "memory": "64Mi"},
                 "labels": {"kwok.x-k8s.io/result": "succeed"}}
    body.update(extra)
    return body


class QueueWorld:
    """Plays, for every job of a namespace, what events and resyncs would trigger: the queue
    handler, then the job controllers' reconcile, status and gc."""

    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.recorder = EventRecorder(kube, "training-queue")
        self.drivers: dict[tuple[str, str], JobDriver] = {}

    def jobs(self) -> list[Obj]:
        out: list[Obj] = []
        for kind, res in RESOURCES.items():
            for item in self.kube.list(res, self.namespace):
                item.setdefault("kind", kind)
                out.append(item)
        return out

    def step(self) -> list[Obj]:
        jobs = self.jobs()
        ctx = Context(self.kube, self.recorder, "reconcile")
        for job in jobs:
            key = ObjectKey(RESOURCES[job["kind"]].api_version, job["kind"], self.namespace,
                            job["metadata"]["name"])
            queue_controller.admit(ctx, key)
        for job in jobs:
            ident = (job["kind"], job["metadata"]["name"])
            driver = self.drivers.get(ident)
            if driver is None:
                driver = self.drivers[ident] = JobDriver(self.kube, job)
            if driver.get() is not None:
                driver.step()
        return self.jobs()

    def run_until(self, check: Callable[[list[Obj]], bool], timeout: float = 60.0,
                  on_step: Callable[[list[Obj]], None] | None = None) -> list[Obj]:
        deadline = time.monotonic() + timeout
        while True:
            jobs = self.step()
            if on_step is not None:
                on_step(jobs)
            if check(jobs):
                return jobs
            assert time.monotonic() < deadline, "timed out; jobs: " + ", ".join(
                f"{j['metadata']['name']}={j.get('status', {}).get('conditions')}"
                for j in jobs)
            time.sleep(0.2)


@pytest.fixture
def world(kube: KubeClient, namespace: str, monkeypatch: pytest.MonkeyPatch) -> QueueWorld:
    """The queue handler admits only while it holds its Lease, here in the test's namespace,
    and reads the priority policy there too (afresh on every pass)."""
    monkeypatch.setattr(queue_controller.PASSES, "min_interval", 0.0)
    monkeypatch.setattr(queue_controller, "POLICY", PolicySource(ttl=0.0))
    monkeypatch.setenv("LEASE_NAMESPACE", namespace)
    monkeypatch.setenv("TRAINING_QUEUE_POLICY_NAMESPACE", namespace)
    return QueueWorld(kube, namespace)


def set_priority_policy(kube: KubeClient, namespace: str, data: dict[str, str]) -> None:
    """The admin's priority policy ConfigMap, in ``namespace``."""
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": CONFIGMAP, "namespace": namespace}, "data": data},
               "platform-admin", res=resources.CONFIGMAPS)


@pytest.fixture
def served_api(cluster: LocalCluster, crds: None,
               monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """``python -m functions serve api`` under gunicorn, against the local cluster; it and the
    in-process app read one priority policy (up to 10 everywhere)."""
    port = free_port()
    monkeypatch.setenv("TRAINING_QUEUE_POLICY_NAMESPACE", POLICY_NAMESPACE)
    kube = cluster.client()
    if kube.get(resources.NAMESPACES, POLICY_NAMESPACE) is None:
        kube.create({"apiVersion": "v1", "kind": "Namespace",
                     "metadata": {"name": POLICY_NAMESPACE}}, res=resources.NAMESPACES)
    set_priority_policy(kube, POLICY_NAMESPACE, {"maxPriority": "10"})
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "PORT": str(port),
           "TRAINING_QUEUE_POLICY_NAMESPACE": POLICY_NAMESPACE}
    process = subprocess.Popen([sys.executable, "-m", "functions", "serve", "api",
                                "--host", "127.0.0.1"], cwd=REPO, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        def up() -> bool:
            try:
                with urllib.request.urlopen(f"{url}/health/readiness", timeout=1) as r:
                    return bool(r.status == 200)
            except OSError:
                return False
        wait_for(up, timeout=20, message="the API under gunicorn")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=20)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["jobs", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err

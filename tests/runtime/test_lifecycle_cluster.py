"""The lifecycle's sender against a real API server, with a training job's lifecycle and a Broker
object whose address is a local sink: where a namespace's events go, the token for the Broker's
audience (a TokenRequest of the sender's own ServiceAccount), the outbox annotation, and what a
refusal and an outage do.
The event path itself is proven through the real Knative (tests/dev/e2e/test_lifecycle.py)."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from devstack.cluster.manifests import apply_objects, load_documents
from devstack.cluster.runner import LocalCluster
from devstack.post_server import PostServer
from functions.core.errors import TemporaryError
from functions.jobs.core import lifecycle as core
from functions.jobs.core.frameworks import PYTORCH
from functions.jobs.lifecycle import events_of
from functions.kube import resources
from functions.kube.client import KubeClient
from functions.kube.config import from_kubeconfig
from functions.runtime import lifecycle
from functions.runtime.sender import ConnectionPool
from tests.jobs.driver import sample

pytestmark = pytest.mark.cluster
Obj = dict[str, Any]
SENDER = "lifecycle-sender"
MANAGER = "lifecycle-test"


@dataclass
class Sink:
    """A Broker's stand-in: keeps what it is sent, answers ``status``."""

    status: int = 202
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self.server = PostServer(self.accept, "lifecycle-sink")

    def accept(self, headers: Mapping[str, str], body: bytes, path: str) -> tuple[int, str]:
        with self._lock:
            self.received.append(({k.lower(): v for k, v in headers.items()}, body))
        return self.status, "" if self.status < 300 else "refused"


@pytest.fixture
def sink() -> Iterator[Sink]:
    found = Sink()
    found.server.start()
    yield found
    found.server.stop()


@pytest.fixture(scope="module")
def brokers_crd(kube: KubeClient, bin_dir: Path) -> None:
    apply_objects(kube, load_documents([bin_dir / "crds" / "eventing" / "broker.yaml"]))


def make_broker(kube: KubeClient, namespace: str, name: str, url: str,
                audience: str | None = None) -> None:
    """A Broker with the address (and, unless given, the audience) Knative would give it."""
    kube.create({"apiVersion": "eventing.knative.dev/v1", "kind": "Broker",
                 "metadata": {"name": name, "namespace": namespace}}, res=resources.BROKERS)
    kube.patch(resources.BROKERS, name, {"status": {"address": {
        "name": "http", "url": url,
        "audience": audience or lifecycle.broker_audience(namespace, name)}}}, namespace,
        subresource="status")


@pytest.fixture
def sender(kube: KubeClient, cluster: LocalCluster, namespace: str) -> KubeClient:
    """A client authenticated as a ServiceAccount that may ask for its own tokens alone."""
    kube.create({"apiVersion": "v1", "kind": "ServiceAccount",
                 "metadata": {"name": SENDER, "namespace": namespace}})
    for obj in ({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                 "metadata": {"name": SENDER, "namespace": namespace},
                 "rules": [{"apiGroups": [""], "resources": ["serviceaccounts/token"],
                            "resourceNames": [SENDER], "verbs": ["create"]}]},
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                 "metadata": {"name": SENDER, "namespace": namespace},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                             "name": SENDER},
                 "subjects": [{"kind": "ServiceAccount", "name": SENDER,
                               "namespace": namespace}]}):
        kube.apply(obj, MANAGER)
    answer = kube.call("create", "POST", resources.SERVICEACCOUNTS.path(
        namespace, SENDER, "token"), body={"apiVersion": "authentication.k8s.io/v1",
                                           "kind": "TokenRequest", "spec": {}})
    token = json.loads(answer.body)["status"]["token"]
    config = dataclasses.replace(from_kubeconfig(cluster.kubeconfig), client_cert_file=None,
                                 client_key_file=None, token=token, token_file=None)
    return KubeClient.from_config(config)


def running_job(kube: KubeClient, namespace: str) -> Obj:
    """The sample PyTorchJob, given a status that shows Created and Running."""
    job = sample("PyTorchJob")
    job["metadata"] = {"name": "mnist", "namespace": namespace}
    created = kube.create(job, res=resources.PYTORCHJOBS)
    stamp = created["metadata"]["creationTimestamp"]
    status = {"conditions": [
        {"type": "Created", "status": "True", "reason": "PyTorchJobCreated",
         "lastTransitionTime": stamp, "lastUpdateTime": stamp},
        {"type": "Running", "status": "True", "reason": "PyTorchJobRunning",
         "lastTransitionTime": stamp, "lastUpdateTime": stamp}]}
    return kube.patch(resources.PYTORCHJOBS, "mnist", {"status": status}, namespace,
                      subresource="status")


def publisher(kube: KubeClient, sender: KubeClient, platform: str | None = None
              ) -> lifecycle.Publisher:
    return lifecycle.Publisher(kube, lifecycle.Destinations(kube, platform),
                               lifecycle.Tokens(sender), ConnectionPool(max_idle=2))


def publish(pub: lifecycle.Publisher, kube: KubeClient, namespace: str) -> int:
    job = kube.get(resources.PYTORCHJOBS, "mnist", namespace)
    assert job is not None
    return pub.publish(resources.PYTORCHJOBS, job, core.RULES, [job["status"]],
                       events_of(PYTORCH, []), MANAGER)


def sent_record(kube: KubeClient, namespace: str) -> dict[str, Any]:
    job = kube.get(resources.PYTORCHJOBS, "mnist", namespace) or {}
    return dict(core.sent_record(job["metadata"].get("annotations")))


def test_a_namespace_broker_receives_each_transition_once(
        kube: KubeClient, crds: None, brokers_crd: None, namespace: str, sender: KubeClient,
        sink: Sink) -> None:
    make_broker(kube, namespace, "default", sink.server.url)
    running_job(kube, namespace)
    pub = publisher(kube, sender)
    assert publish(pub, kube, namespace) == 2
    assert [h["ce-type"] for h, _ in sink.received] == [
        "org.opendatahub.training.job.created", "org.opendatahub.training.job.running"]
    assert set(sent_record(kube, namespace)) == {"created", "running"}
    # the token is the sender's own, for the Broker's audience
    token = sink.received[0][0]["authorization"].removeprefix("Bearer ")
    review = kube.create({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                          "metadata": {},
                          "spec": {"token": token, "audiences": [
                              lifecycle.broker_audience(namespace, "default")]}})
    assert review["status"]["authenticated"] is True
    assert review["status"]["user"]["username"] == \
        f"system:serviceaccount:{namespace}:{SENDER}"
    # recorded: a second pass owes nothing
    assert publish(pub, kube, namespace) == 0
    assert len(sink.received) == 2


def test_a_namespace_label_names_the_broker(kube: KubeClient, crds: None, brokers_crd: None,
                                            namespace: str, sender: KubeClient,
                                            sink: Sink) -> None:
    make_broker(kube, namespace, "default", "http://127.0.0.1:9/never")
    make_broker(kube, namespace, "training", sink.server.url)
    kube.patch(resources.NAMESPACES, namespace,
               {"metadata": {"labels": {lifecycle.BROKER_LABEL: "training"}}})
    running_job(kube, namespace)
    assert publish(publisher(kube, sender), kube, namespace) == 2
    assert len(sink.received) == 2


def test_no_broker_no_events(kube: KubeClient, crds: None, brokers_crd: None, namespace: str,
                             sender: KubeClient) -> None:
    running_job(kube, namespace)
    before = kube.request_count()
    pub = publisher(kube, sender)
    assert publish(pub, kube, namespace) == 0
    assert publish(pub, kube, namespace) == 0
    # (the job read, the namespace and its Broker looked up) then (the job read alone)
    assert kube.request_count() - before == (1 + 2) + (1 + 0)
    assert sent_record(kube, namespace) == {}


def test_the_platform_broker_where_the_administrator_asks(
        kube: KubeClient, crds: None, brokers_crd: None, namespace: str, sender: KubeClient,
        sink: Sink) -> None:
    platform = f"{namespace}-platform"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": platform}},
                res=resources.NAMESPACES)
    try:
        make_broker(kube, platform, "odh-training", sink.server.url)
        running_job(kube, namespace)
        pub = publisher(kube, sender, platform=f"{platform}/odh-training")
        assert publish(pub, kube, namespace) == 2
        assert {h["ce-jobnamespace"] for h, _ in sink.received} == {namespace}
    finally:
        kube.delete(resources.NAMESPACES, platform)


@pytest.mark.parametrize(("status", "outcome"), [
    pytest.param(403, "refused", id="refused-stays-owed"),
    pytest.param(503, "retried", id="outage-fails-the-pass"),
    pytest.param(429, "retried", id="too-many-requests-fails-the-pass"),
])
def test_a_broker_that_does_not_take_the_event(
        kube: KubeClient, crds: None, brokers_crd: None, namespace: str, sender: KubeClient,
        sink: Sink, status: int, outcome: str) -> None:
    sink.status = status
    make_broker(kube, namespace, "default", sink.server.url)
    running_job(kube, namespace)
    pub = publisher(kube, sender)
    refused_before = lifecycle.SENT.labels("refused")._value.get()
    if outcome == "refused":
        assert publish(pub, kube, namespace) == 0
        assert lifecycle.SENT.labels("refused")._value.get() == refused_before + 1
    else:
        with pytest.raises(TemporaryError):
            publish(pub, kube, namespace)
    assert sent_record(kube, namespace) == {}
    # once the Broker takes it, the next pass sends what is owed
    sink.status = 202
    assert publish(pub, kube, namespace) == 2
    assert set(sent_record(kube, namespace)) == {"created", "running"}


def test_two_replicas_name_each_transition_alike(
        kube: KubeClient, crds: None, brokers_crd: None, namespace: str, sender: KubeClient,
        sink: Sink) -> None:
    """Two replicas (a publisher each, caches of their own) that both see the job before
    either records what it sent: the sink may get a transition twice, under one id."""
    make_broker(kube, namespace, "default", sink.server.url)
    running_job(kube, namespace)
    job = kube.get(resources.PYTORCHJOBS, "mnist", namespace)
    assert job is not None
    replicas = [publisher(kube, sender), publisher(kube, sender)]
    sent = [pub.publish(resources.PYTORCHJOBS, job, core.RULES, [job["status"]],
                        events_of(PYTORCH, []), MANAGER) for pub in replicas]
    assert sent == [2, 2]
    ids = [h["ce-id"] for h, _ in sink.received]
    assert len(ids) == 4 and len(set(ids)) == 2
    # what either recorded, the other's next pass reads: nothing more is sent
    assert [publish(pub, kube, namespace) for pub in replicas] == [0, 0]


def test_a_broker_naming_another_audience_gets_no_token(
        kube: KubeClient, crds: None, brokers_crd: None, namespace: str, sender: KubeClient,
        sink: Sink) -> None:
    """Whoever can write a Broker's status must not obtain, through this function, a token of
    its ServiceAccount for another audience (the API server's, say)."""
    make_broker(kube, namespace, "default", sink.server.url,
                audience="https://kubernetes.default.svc.cluster.local")
    running_job(kube, namespace)
    tokens_asked = kube.request_count()
    assert publish(publisher(kube, sender), kube, namespace) == 0
    assert sink.received == []
    assert sender.request_count("create") == 0  # no TokenRequest
    assert kube.request_count() - tokens_asked == 1 + 2  # the job, the namespace, the Broker

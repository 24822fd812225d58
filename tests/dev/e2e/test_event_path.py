"""End to end, as a user runs it, through the real Knative Eventing with the resync off
(``conftest.py``): the event path Ready by the real controllers, each job kind run to its end on
the adapter's events, and the Trainer made Ready and repaired on the events of its children."""

from __future__ import annotations

import copy
import json
import time
import urllib.request
from collections import Counter

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from devstack import knative
from devstack.knative_stack import RECORDER_TRIGGER
from devstack.stack import DevStack, function_identities
from functions.core.triggers import compile_trigger_filter
from functions.kube import resources
from functions.kube.client import KubeClient
from functions.kube.resources import Resource
from functions.runtime.eventing import SOURCE_FILTERS_FEATURE, source_filter_patches
from functions.runtime.registry import load_controllers
from functions.trainer import kinds
from tests.chaos.scenario import succeeding_job
from tests.dev.e2e.conftest import NAMESPACE, attributes, create_namespaces
from tests.runtime.test_event_coverage import watched_kinds
from tests.support import REPO, condition, wait_for

SAMPLES = REPO / "config" / "samples"
EVENT_KINDS = ("Broker", "Trigger", "ApiServerSource")


def test_the_event_path_is_ready_by_the_real_controllers(stack: DevStack,
                                                         kube: KubeClient) -> None:
    found = {kind: kube.list(kube.resource_for(
        "sources.knative.dev/v1" if kind == "ApiServerSource" else "eventing.knative.dev/v1",
        kind), NAMESPACE) for kind in EVENT_KINDS}
    assert len(found["Broker"]) == 1 and len(found["ApiServerSource"]) == 6
    # three functions and the recorder (and a test's own, when it ran first)
    assert {"odh-training-reconcile", "odh-training-gc", "odh-training-status",
            RECORDER_TRIGGER} <= {t["metadata"]["name"] for t in found["Trigger"]}
    for kind, objects in found.items():
        for obj in objects:
            ready = knative.ready_condition(obj)
            assert ready.get("status") == "True", (kind, obj["metadata"]["name"], ready)
            assert obj["status"].get("observedGeneration") == obj["metadata"]["generation"]
    # the adapters run as the ApiServerSource controller deployed them
    deployments = kube.list(resources.DEPLOYMENTS, NAMESPACE)
    adapters = [d for d in deployments
                if any(o.get("kind") == "ApiServerSource"
                       for o in d["metadata"].get("ownerReferences") or [])]
    assert len(adapters) == 6
    assert all((d.get("status") or {}).get("readyReplicas") == 1 for d in adapters)
    assert kube.list(kube.resource_for("sources.knative.dev/v1", "PingSource"),
                     NAMESPACE) == []
    # the feature flags as released, which docs/dev-stack.md states, but for the one the source
    # filters need (config/components/source-filters, which make dev adds) and OIDC, which
    # the functions need (only the Broker's deliveries are accepted)
    assert stack.knative is not None
    turned_on = {SOURCE_FILTERS_FEATURE: "enabled", knative.OIDC_FEATURE: "enabled"}
    expected = {**knative.FEATURE_FLAGS, **turned_on}
    assert stack.knative.features() == turned_on
    live = knative.features(kube)
    assert {k: live.get(k) for k in expected} == expected
    [jobs_source] = [s for s in found["ApiServerSource"]
                     if s["metadata"]["name"] == "odh-training-objects"]
    assert jobs_source["spec"].get("filters"), "the objects source has no filters"


def test_the_local_pods_reach_the_cluster_network_through_its_socks_proxy(
        stack: DevStack) -> None:
    """Every local pod (the Knative data plane among them) has the cluster network's SOCKS5
    proxy as its ``HTTP_PROXY``, and its network half hands that port's connections to the
    network's SOCKS route, so each connection is joined to one endpoint and its bytes pass
    unread (docs/architecture.md, "What runs where"); the events of the other tests crossed it."""
    assert stack.pods is not None and stack.pods.kubelet is not None
    local = [p for p in stack.pods.kubelet.snapshot() if p.process is not None]
    binaries = {p.binary for p in local}
    assert {"broker_ingress", "broker_filter", "imc_dispatcher",
            "apiserver_receive_adapter"} <= binaries, binaries
    port = stack.pods.proxy_port
    for pod in local:
        config = json.loads((stack.pods.pod_network().pods_dir / pod.pod["metadata"]["uid"]
                             / "config.json").read_text())
        proxy = f"socks5://127.0.0.1:{port}"
        assert (config["env"]["HTTP_PROXY"], config["env"]["HTTPS_PROXY"]) == (proxy, proxy)
        assert {"port": port, "name": "socks"} in [
            {k: v for k, v in route.items() if k != "handoff"} for route in config["outbound"]]


def test_functions_run_as_their_own_service_accounts(stack: DevStack) -> None:
    identities = function_identities(REPO / "config" / "serving")
    assert {i.function for i in identities} == {"reconcile", "gc", "status"}
    assert all(i.service_account for i in identities)
    assert set(stack.function_urls) == {"reconcile", "gc", "status", "dead-letters"}


# The samples run here (``MPIJob-v1``: the MPIJob written through kubeflow.org/v1).
JOB_KINDS = ("PyTorchJob", "TFJob", "MPIJob", "MPIJob-v1", "MXJob", "XGBoostJob", "PaddleJob",
             "JAXJob")
# Mapped and watched child kinds a sample does not make: MPIJob v1 runs a launcher pod, with
# no Service and no launcher batch Job.
NOT_MADE = {"MPIJob-v1": {"Service", "Job"}}
# Watched child kinds whose creations and updates the source filters drop (only a deletion of
# one is sent), so a job that runs to its end sends none.
SOURCE_FILTERS = compile_trigger_filter({"filters": [
    f for patch in source_filter_patches(REPO / "config" / "components" / "source-filters")
    for f in patch["spec"]["filters"]]})
SENT_ONLY_ON_DELETE = {kind for kind in ("Pod", "Service", "Job") if not any(
    SOURCE_FILTERS.matches({"type": f"dev.knative.apiserver.resource.{verb}", "kind": kind})
    for verb in ("add", "update"))}
DRIFT_NAMESPACE = "e2e-drift"


@pytest.fixture(scope="module")
def job_namespaces(stack: DevStack, kube: KubeClient) -> list[str]:
    """The namespaces of the job tests, created together. Each namespace created makes the
    ApiServerSource controller rewrite the all-namespaces adapter's Deployment, and the
    restarted adapter misses what changes before its watches start (a gap the functions close
    with a resync, ``test_a_change_while_an_adapter_restarts_...``). The tests below count
    the events each job's children sent, so they start once that rollout has settled and the
    new adapter delivers."""
    names = [f"e2e-{kind.lower()}" for kind in JOB_KINDS] + [DRIFT_NAMESPACE]
    create_namespaces(stack, kube, names)
    return names


@pytest.mark.parametrize(("kind", "res"), [
    pytest.param("PyTorchJob", resources.PYTORCHJOBS, id="pytorchjob"),
    pytest.param("TFJob", resources.TFJOBS, id="tfjob"),
    pytest.param("MPIJob", resources.MPIJOBS, id="mpijob"),
    pytest.param("MPIJob-v1", resources.MPIJOBS, id="mpijob-v1"),
    pytest.param("MXJob", resources.MXJOBS, id="mxjob"),
    pytest.param("XGBoostJob", resources.XGBOOSTJOBS, id="xgboostjob"),
    pytest.param("PaddleJob", resources.PADDLEJOBS, id="paddlejob"),
    pytest.param("JAXJob", resources.JAXJOBS, id="jaxjob"),
])
def test_a_job_succeeds_on_the_adapters_events(stack: DevStack, kube: KubeClient,
                                               job_namespaces: list[str], kind: str,
                                               res: Resource) -> None:
    namespace = f"e2e-{kind.lower()}"
    assert namespace in job_namespaces
    job = succeeding_job(kind, namespace)
    name = job["metadata"]["name"]
    started = time.monotonic()
    kube.apply(job, "e2e-user")
    wait_for(lambda: condition(kube.get(res, name, namespace), "Succeeded")
             .get("status") == "True", 60, 0.2, f"the sample {kind} to succeed")
    print(f"{kind} Succeeded {time.monotonic() - started:.1f}s after it was created")

    assert stack.knative is not None
    events = [attributes(e) for e in stack.knative.events()]
    assert not [e for e in events if e.get("type") == "dev.knative.sources.ping"]
    ours = [e for e in events if e.get("namespace") == namespace]
    seen = Counter(e.get("kind") for e in ours)
    # every child kind its controllers map that a source watches: the created objects match
    # the sources' selectors (the MPIJob's launcher Job among them)
    children = {(c.api_version.rpartition("/")[0], c.kind) for controller in load_controllers()
                if controller.parent.kind == job["kind"] for c in controller.children}
    expected = ({k for _, k in children & watched_kinds()} - NOT_MADE.get(kind, set())
                - SENT_ONLY_ON_DELETE | {job["kind"]})
    assert expected <= set(seen), seen
    for event in ours:
        # from the adapter (ceOverrides of eventing/apiserversource.yaml), through the Broker
        # ingress (which stamps the arrival time)
        assert event["type"].startswith("dev.knative.apiserver.resource."), event
        assert event.get("controller") == "odh-training", event
        assert event.get("knativearrivaltime"), event
    sources = {s["source"] for obj in kube.list(kube.resource_for(
        "sources.knative.dev/v1", "ApiServerSource"), NAMESPACE)
        for s in obj["status"].get("ceAttributes") or []}
    assert {e["source"] for e in ours} <= sources
    # The status function's own status writes came back to it as events of the job, which it
    # answered without a pass (functions.runtime.passes.OwnWrites).
    assert own_write_echoes(stack, job["kind"]) >= 1


def own_write_echoes(stack: DevStack, kind: str) -> float:
    """The job updates of ``kind`` the status function answered without a pass (the only
    updates of a job kind it ignores), from its ``/metrics``."""
    url = stack.function_urls["status"].rstrip("/") + "/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return sum(sample.value for family in text_string_to_metric_families(text)
               for sample in family.samples
               if sample.name == "odh_training_events_total"
               and sample.labels.get("kind") == kind
               and sample.labels.get("outcome") == "ignored"
               and sample.labels.get("type") == "dev.knative.apiserver.resource.update")


def test_a_deleted_job_service_is_replaced_on_its_delete_event(
        kube: KubeClient, job_namespaces: list[str]) -> None:
    namespace = DRIFT_NAMESPACE
    job = copy.deepcopy(yaml.safe_load((SAMPLES / "pytorchjob.yaml").read_text()))
    job["metadata"]["namespace"] = namespace
    name = job["metadata"]["name"]
    kube.apply(job, "e2e-user")
    wait_for(lambda: condition(kube.get(resources.PYTORCHJOBS, name, namespace), "Running")
             .get("status") == "True", 60, 0.2, "the PyTorchJob to run")
    service = wait_for(lambda: kube.get(resources.SERVICES, f"{name}-master-0", namespace),
                       10, 0.2, "the master's Service")
    kube.delete(resources.SERVICES, service["metadata"]["name"], namespace)
    started = time.monotonic()
    wait_for(lambda: (s := kube.get(resources.SERVICES, f"{name}-master-0", namespace))
             and s["metadata"]["uid"] != service["metadata"]["uid"], 10, 0.1,
             "the Service to be created again")
    print(f"Service replaced in {time.monotonic() - started:.1f}s")


def test_the_trainer_becomes_ready_on_the_adapters_events(stack: DevStack,
                                                          kube: KubeClient) -> None:
    trainer = yaml.safe_load((SAMPLES / "trainer.yaml").read_text())
    kube.apply(trainer, "e2e-user")
    ready = wait_for(
        lambda: (t := kube.get(resources.TRAINERS, "default-trainer"))
        and condition(t, "Ready").get("status") == "True" and t, 120, 0.5,
        "the Trainer to become Ready")
    assert ready["status"]["phase"] == "Ready"
    stack.check_processes()


def test_trainer_deployment_drift_is_repaired_on_its_event(stack: DevStack,
                                                          kube: KubeClient) -> None:
    """Runs after the Trainer became Ready: an image changed by hand is set back."""
    [deployment] = kube.list(resources.DEPLOYMENTS,
                             label_selector="platform.opendatahub.io/part-of=trainer")
    meta = deployment["metadata"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    kube.patch(resources.DEPLOYMENTS, meta["name"], {"spec": {"template": {"spec": {
        "containers": [{"name": container["name"], "image": "example.invalid/drift:1"}]}}}},
        meta["namespace"], content_type="application/strategic-merge-patch+json")
    started = time.monotonic()
    wait_for(lambda: (d := kube.get(resources.DEPLOYMENTS, meta["name"], meta["namespace"]))
             and d["spec"]["template"]["spec"]["containers"][0]["image"] == container["image"],
             10, 0.1, "the Deployment's image to be set back")
    print(f"Deployment image repaired in {time.monotonic() - started:.1f}s")


@pytest.mark.parametrize("res", [
    pytest.param(kinds.CLUSTERROLES, id="clusterrole"),
    pytest.param(resources.SERVICES, id="service"),
    pytest.param(resources.SERVICEACCOUNTS, id="serviceaccount"),
])
def test_a_deleted_trainer_child_is_replaced_on_its_delete_event(stack: DevStack,
                                                                kube: KubeClient,
                                                                res: Resource) -> None:
    """Runs after the Trainer became Ready."""
    [child, *_] = kube.list(res, label_selector="platform.opendatahub.io/part-of=trainer")
    meta = child["metadata"]
    kube.delete(res, meta["name"], meta.get("namespace"))
    started = time.monotonic()
    wait_for(lambda: (o := kube.get(res, meta["name"], meta.get("namespace")))
             and o["metadata"]["uid"] != meta["uid"], 10, 0.1,
             f"{res.kind} {meta['name']} to be created again")
    print(f"{res.kind} {meta['name']} replaced in {time.monotonic() - started:.1f}s")
    knative = stack.knative
    assert knative is not None

    def of_child() -> list[dict[str, str]]:
        return [e for e in map(attributes, knative.events())
                if e.get("kind") == res.kind and e.get("name") == meta["name"]]

    wait_for(lambda: [e for e in of_child()
                      if e.get("type") == "dev.knative.apiserver.resource.delete"
                      and e.get("component") == "trainer"], 10, 0.1,
             f"the delete event through the Broker; its events: {of_child()}")


def test_the_stack_said_each_stage_as_it_started_and_ended(stack: DevStack) -> None:
    """`make dev` shows its progress: each stage's start and end, in order (logged as they
    come; a cold start takes a minute)."""
    assert stack.stages == [(name, when) for name in ("cluster", "install", "ready")
                            for when in ("started", "done")]
    assert list(stack.timings) == ["cluster", "install", "ready"]

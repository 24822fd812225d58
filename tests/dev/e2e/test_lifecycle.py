"""The training lifecycle as a tenant subscribes to it, through the real Knative Eventing with
the resync off: a Broker and Triggers in the tenant's namespace (``config/samples``), sinks of
the tenant's own, and jobs that succeed, restart, fail and are deleted by their TTL while the
status function restarts and every delivery to the functions is sent twice. Each transition
of each job (as a watch of the job saw its statuses) reaches the tenant's sink under one id,
none is missing, the failed-jobs Trigger gets the failure alone, another namespace's sink gets
nothing, and the dev stack's recording holds what the tenant's Broker accepted. Then every
series config/monitoring names is in the functions' ``/metrics``, and the Trainer's Ready
reaches the platform's Broker."""

from __future__ import annotations

import copy
import json
import os
import re
import time
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from devstack import knative
from devstack.cluster import kwok
from devstack.knative_stack import RECORDER_TRIGGER, Recorder
from devstack.recording import RecordedRequest
from devstack.stack import DevStack
from functions.core.lifecycle import event_id
from functions.jobs.core import lifecycle as core
from functions.kube import resources
from functions.kube.client import KubeClient
from functions.kube.resources import Resource
from functions.trainer.core import lifecycle as trainer_lifecycle
from tests.chaos.scenario import succeeding_job
from tests.deploy.test_monitoring import dashboard_expressions, rule_expressions, series_named
from tests.dev.e2e.conftest import RECORDINGS, attributes, create_namespaces
from tests.dev.e2e.observers import Duplicator, Statuses
from tests.support import REPO, condition, wait_for

Obj = dict[str, Any]
TENANT, OTHER = "e2e-lifecycle", "e2e-lifecycle-other"
SAMPLES = REPO / "config" / "samples"
SINK, FAILED_SINK = "lifecycle-sink", "job-alerts"


@dataclass
class Tenant:
    sinks: dict[str, Recorder]


def _samples(name: str, namespace: str) -> list[Obj]:
    objects = [o for o in yaml.safe_load_all((SAMPLES / name).read_text()) if o]
    for obj in objects:
        obj["metadata"]["namespace"] = namespace
    return objects


def _sink(stack: DevStack, name: str, namespace: str) -> Recorder:
    assert stack.knative is not None
    sink = Recorder()
    sink.server.start()
    stack.knative.route(name, namespace, [sink.server.url])
    return sink


@pytest.fixture(scope="module")
def tenant(stack: DevStack, kube: KubeClient) -> Iterator[Tenant]:
    """The samples' Broker in both namespaces, a Trigger taking everything to a sink in each,
    and the samples' failed-jobs Trigger in the tenant's."""
    create_namespaces(stack, kube, [TENANT, OTHER])
    sinks: dict[str, Recorder] = {}
    objects: list[Obj] = []
    for namespace in (TENANT, OTHER):
        sinks[namespace] = _sink(stack, SINK, namespace)
        objects += [*_samples("lifecycle-broker.yaml", namespace), {
            "apiVersion": "eventing.knative.dev/v1", "kind": "Trigger",
            "metadata": {"name": "every-transition", "namespace": namespace},
            "spec": {"broker": "default",
                     "subscriber": {"uri": f"http://{SINK}.{namespace}.svc.cluster.local"}}}]
    sinks[FAILED_SINK] = _sink(stack, FAILED_SINK, TENANT)
    [failed] = _samples("lifecycle-trigger.yaml", TENANT)
    failed["spec"]["subscriber"] = {"uri": f"http://{FAILED_SINK}.{TENANT}.svc.cluster.local"}
    objects.append(failed)
    for obj in objects:
        kube.apply(obj, "e2e-user")
    # and the Trigger of the dev stack's recorder, which it gives each new Broker
    recorders = [knative.Ref("eventing.knative.dev/v1", "Trigger", namespace,
                             f"{RECORDER_TRIGGER}-default") for namespace in (TENANT, OTHER)]
    refs = knative.refs_of(objects) + recorders
    knative.wait_until(lambda: knative.not_ready(kube, refs), 120,
                       "the tenants' Brokers and Triggers are not Ready")
    try:
        yield Tenant(sinks)
    finally:
        for sink in sinks.values():
            sink.server.stop()


def received(sink: Recorder) -> list[tuple[dict[str, str], Obj]]:
    return [(attributes(r), orjson.loads(r.body)) for r in sink.snapshot()]


def ids_about(sink: Recorder, name: str) -> dict[str, int]:
    """How often each id about job ``name`` reached ``sink``."""
    counts: dict[str, int] = defaultdict(int)
    for attrs, _ in received(sink):
        if attrs.get("jobname") == name:
            counts[attrs["id"]] += 1
    return dict(counts)


def _pytorchjob() -> Obj:
    """The sample PyTorchJob, its pods finishing 20 s after they start, deleted 5 s after it
    succeeds."""
    job = succeeding_job("PyTorchJob", TENANT)
    job["metadata"]["name"] = "lifecycle-pytorch"
    job["spec"].setdefault("runPolicy", {})["ttlSecondsAfterFinished"] = 5
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["metadata"]["annotations"][kwok.DELAY_ANNOTATION] = "20s"
    return job


def _mpijob() -> Obj:
    """The sample MPIJob, its launcher finishing 10 s after it starts."""
    job = succeeding_job("MPIJob", TENANT)
    job["metadata"]["name"] = "lifecycle-mpi"
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["metadata"]
    launcher["annotations"][kwok.DELAY_ANNOTATION] = "10s"
    return job


def _failing_tfjob() -> Obj:
    """The sample TFJob whose workers exit 137 after 2 s, which restartPolicy ExitCode retries
    once (backoffLimit 1) before the job fails."""
    job = succeeding_job("TFJob", TENANT)
    job["metadata"]["name"] = "lifecycle-tf"
    job["spec"].setdefault("runPolicy", {})["backoffLimit"] = 1
    worker = job["spec"]["tfReplicaSpecs"]["Worker"]
    worker["replicas"] = 1
    worker["restartPolicy"] = "ExitCode"
    meta = worker["template"]["metadata"]
    meta["labels"][kwok.RESULT_LABEL] = "fail"
    meta["annotations"][kwok.EXIT_CODE_ANNOTATION] = "137"
    return job


def _finished(kube: KubeClient, res: Resource, name: str, type_: str) -> bool:
    return condition(kube.get(res, name, TENANT), type_).get("status") == "True"


@dataclass
class Run:
    """What the scenario left: the ids each job's statuses showed, the deliveries sent twice."""

    expected: dict[str, set[str]]
    duplicated: int


@pytest.fixture(scope="module")
def run(stack: DevStack, kube: KubeClient, tenant: Tenant) -> Run:
    """A PyTorchJob (deleted by its TTL), an MPIJob and a failing TFJob in the tenant's
    namespace, the status function stopped and started again mid-job, and every delivery of
    the platform's Broker about them sent twice."""
    pytorch, mpi, tf = _pytorchjob(), _mpijob(), _failing_tfjob()
    with (Statuses(kube, resources.PYTORCHJOBS, TENANT, core.RULES) as pytorch_seen,
          Statuses(kube, resources.MPIJOBS, TENANT, core.RULES) as mpi_seen,
          Statuses(kube, resources.TFJOBS, TENANT, core.RULES) as tf_seen,
          Duplicator(stack, kube, TENANT) as duplicates):
        for job in (pytorch, mpi, tf):
            kube.apply(copy.deepcopy(job), "e2e-user")
        wait_for(lambda: _finished(kube, resources.PYTORCHJOBS, "lifecycle-pytorch",
                                   "Running"), 60, 0.2, "the PyTorchJob Running")
        # the status function stops mid-job (its deliveries fail and are retried) and starts
        # again before the pods finish
        stack.stop_function("status")
        time.sleep(5)
        stack.start_function("status")
        wait_for(lambda: _finished(kube, resources.MPIJOBS, "lifecycle-mpi", "Succeeded"),
                 120, 0.5, "the MPIJob to succeed")
        wait_for(lambda: _finished(kube, resources.TFJOBS, "lifecycle-tf", "Failed"), 120,
                 0.5, "the TFJob to fail")
        wait_for(lambda: kube.get(resources.PYTORCHJOBS, "lifecycle-pytorch", TENANT) is None,
                 120, 0.5, "the PyTorchJob to succeed and be deleted by its TTL")
    expected = {
        "lifecycle-pytorch": pytorch_seen.expected_ids("lifecycle-pytorch"),
        "lifecycle-mpi": mpi_seen.expected_ids("lifecycle-mpi"),
        "lifecycle-tf": tf_seen.expected_ids("lifecycle-tf"),
    }
    completed = next(s["completionTime"] for s in reversed(pytorch_seen.seen["lifecycle-pytorch"])
                     if s.get("completionTime"))
    deleted = core.deletion({"completionTime": completed}, 5)
    assert deleted is not None
    expected["lifecycle-pytorch"].add(event_id(pytorch_seen.uids["lifecycle-pytorch"],
                                                    deleted))
    return Run(expected, duplicates.sent)


def test_a_tenant_receives_each_transition_of_its_jobs_once(
        stack: DevStack, tenant: Tenant, run: Run) -> None:
    sink, expected = tenant.sinks[TENANT], run.expected
    assert run.duplicated > 0

    def all_received() -> bool:
        return all(set(ids_about(sink, name)) >= ids for name, ids in expected.items())

    wait_for(all_received, 60, 0.5, "every transition at the tenant's sink")
    time.sleep(3)  # anything sent late would show now
    for name, ids in expected.items():
        assert set(ids_about(sink, name)) == ids, name
    kinds = {name: sorted(i.split("/")[1] for i in ids) for name, ids in expected.items()}
    print(f"transitions: {kinds}; deliveries sent twice: {run.duplicated}")
    assert {"created", "running", "succeeded", "deleted"} <= set(kinds["lifecycle-pytorch"])
    assert {"created", "running", "succeeded"} <= set(kinds["lifecycle-mpi"])
    assert {"created", "running", "restarting", "failed"} <= set(kinds["lifecycle-tf"])

    events = received(sink)
    for attrs, data in events:
        parsed = core.LifecycleData.model_validate(data)
        assert attrs["type"] == core.TYPE_PREFIX + parsed.transition
        assert attrs["source"].endswith(f"/namespaces/{TENANT}/{parsed.kind.lower()}s/"
                                        f"{parsed.name}")
        assert (attrs["jobnamespace"], attrs["jobname"]) == (TENANT, parsed.name)
    restarting = [d for a, d in events if a["jobname"] == "lifecycle-tf"
                  and a["type"].endswith(".restarting")]
    assert any(code["exitCode"] == 137 for d in restarting for code in d["exitCodes"])
    [succeeded] = {a["id"]: d for a, d in events if a["jobname"] == "lifecycle-pytorch"
                   and a["type"].endswith(".succeeded")}.values()
    assert succeeded["durations"]["runningSeconds"] >= 20
    _keep(sink, "lifecycle-pytorch")

    failed_only = received(tenant.sinks[FAILED_SINK])
    assert {a["id"] for a, _ in failed_only} == {
        i for i in expected["lifecycle-tf"] if "/failed/" in i}
    assert received(tenant.sinks[OTHER]) == []

    # what the tenant's Broker accepted is in the dev stack's recording
    assert stack.knative is not None
    recorded = {attributes(r)["id"] for r in stack.knative.events()
                if r.path == f"/{TENANT}/default"}
    assert recorded >= set().union(*expected.values())


def _keep(sink: Recorder, name: str) -> None:
    """With ``UPDATE_RECORDINGS=1``, keep one id of each of the job's events (the first to
    arrive) as ``tests/data/recordings/lifecycle-<kind>.jsonl``: docs/lifecycle.md shows it
    and tests/jobs/core/test_lifecycle.py checks it against the schema."""
    if not os.environ.get("UPDATE_RECORDINGS"):
        return
    kept: dict[str, RecordedRequest] = {}
    for request in sink.snapshot():
        attrs = attributes(request)
        if attrs.get("jobname") == name:
            kept.setdefault(attrs["id"], request)
    ordered = sorted(kept.values(), key=lambda r: attributes(r)["time"])
    RECORDINGS.mkdir(parents=True, exist_ok=True)
    with (RECORDINGS / "lifecycle-pytorchjob.jsonl").open("w") as out:
        for request in ordered:
            line = request.to_json()
            line["headers"] = {k: v for k, v in line["headers"].items()
                               if k.lower().startswith("ce-") or k.lower() == "content-type"}
            out.write(json.dumps(line, separators=(",", ":")) + "\n")


def test_every_series_the_alerts_and_the_dashboard_name_is_scraped(
        stack: DevStack, kube: KubeClient, run: Run) -> None:
    """After the jobs above (a failure, an MPIJob, a TTL deletion, lifecycle events sent) and
    a burst of jobs run by the status function as it is now (its restart above reset its
    series), each series config/monitoring names is in the functions' ``/metrics``."""
    burst = [f"lifecycle-burst-{n}" for n in range(3)]
    for name in burst:
        job = succeeding_job("PyTorchJob", TENANT)
        job["metadata"]["name"] = name
        kube.apply(job, "e2e-user")
    wait_for(lambda: all(_finished(kube, resources.PYTORCHJOBS, name, "Succeeded")
                         for name in burst), 120, 0.5, "the burst to succeed")
    scraped: set[str] = set()
    shown = re.compile(r"^(training_operator_jobs_\w+|odh_training_job_\w+_(count|sum)|"
                       r"odh_training_jobs|odh_training_queue_depth|mpi_operator_\w+|"
                       r"odh_training_lifecycle_events_total)[{ ]")
    for function in ("reconcile", "gc", "status"):
        with urllib.request.urlopen(stack.function_urls[function] + "metrics",
                                    timeout=10) as answer:
            text = answer.read().decode()
        scraped |= {s.name for family in text_string_to_metric_families(text)
                    for s in family.samples}
        print(f"--- {function} /metrics (service levels) ---")
        print("\n".join(line for line in text.splitlines() if shown.match(line)))
    named = series_named(rule_expressions() + dashboard_expressions())
    assert named - scraped == set()


def test_the_platform_broker_receives_the_trainers_lifecycle(stack: DevStack,
                                                             kube: KubeClient) -> None:
    """The stack sends the lifecycle to the platform's Broker too (``conftest.py``): the
    Trainer's Ready reaches it, under the id of the transition a watch of the Trainer saw."""
    trainer = yaml.safe_load((SAMPLES / "trainer.yaml").read_text())
    with Statuses(kube, resources.TRAINERS, None, trainer_lifecycle.RULES) as seen:
        kube.apply(trainer, "e2e-user")
        wait_for(lambda: condition(kube.get(resources.TRAINERS, "default-trainer"), "Ready")
                 .get("status") == "True", 120, 0.5, "the Trainer to become Ready")
        time.sleep(1)  # the watch sees the Ready status too
    expected = seen.expected_ids("default-trainer")
    assert any("/ready/" in i for i in expected), expected
    assert stack.knative is not None

    def recorded() -> set[str]:
        assert stack.knative is not None
        return {a["id"] for a in map(attributes, stack.knative.events())
                if a.get("type", "").startswith(trainer_lifecycle.TYPE_PREFIX)
                and a.get("subject") == "default-trainer"}

    wait_for(lambda: recorded() >= expected, 30, 0.5, "the Trainer's lifecycle recorded")
    ready = [a for a in map(attributes, stack.knative.events())
             if a.get("type") == trainer_lifecycle.TYPE_PREFIX + "ready"]
    assert ready and all(a["source"] == trainer_lifecycle.source_of("default-trainer")
                         for a in ready)

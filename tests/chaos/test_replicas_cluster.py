"""Scale-out: every function runs as several processes behind the Broker (as Knative scales a
Service), a share of their API requests fail, and a burst of jobs still ends exactly right.

The stack is the dev stack (real ApiServerSource adapter, the router spreading deliveries over
the replicas in turn, a retry perhaps to another) with the resync off, so the events alone
must carry every job to its end. A watch from the test sees every pod and every status the
jobs go through, and checks what concurrency between replicas could break:

* no duplicate: each job's distinct pods are exactly its replicas plus the restarts it counted
  (less the last one of a job that failed on backoffLimit, whose pod is not replaced); a
  second create, a lost or a doubled count all break that;
* restarts counted exactly once each, and backoffLimit honoured;
* no status regression: a finished job stays finished with the same completion time, Created
  is never lost;
* nothing stuck: deleted jobs and their pods go away.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack.cluster import kwok
from devstack.stack import DevStack
from functions.jobs.core.frameworks import LABEL_JOB_NAME
from functions.jobs.core.planning import RESTARTS_ANNOTATION
from functions.kube import resources
from functions.kube.client import KubeClient
from tests.jobs.driver import sample
from tests.support import condition, wait_for, watched

REPLICAS = 3
FAULTS = "rate=0.1,seed=11"
SUCCEEDING, FAILING = 8, 4
BACKOFF_LIMIT = 2
NAMESPACE = "scale-out"
INDEX = "training.kubeflow.org/replica-index"
TYPE = "training.kubeflow.org/replica-type"

Obj = dict[str, Any]


def job(name: str, fail: bool) -> Obj:
    """The sample PyTorchJob (Master 1, Worker 1); its pods finish by themselves (kwok), and the
    failing ones exit 137, which restartPolicy ExitCode retries until backoffLimit."""
    out = copy.deepcopy(sample("PyTorchJob"))
    out["metadata"] = {"name": name, "namespace": NAMESPACE}
    out["spec"].setdefault("runPolicy", {})["backoffLimit"] = BACKOFF_LIMIT
    for rtype, spec in out["spec"]["pytorchReplicaSpecs"].items():
        spec["replicas"] = 1
        meta = spec["template"].setdefault("metadata", {})
        labels, annotations = meta.setdefault("labels", {}), meta.setdefault("annotations", {})
        annotations[kwok.DELAY_ANNOTATION] = "2s"
        if fail and rtype == "Worker":
            spec["restartPolicy"] = "ExitCode"
            labels[kwok.RESULT_LABEL] = "fail"
            annotations[kwok.EXIT_CODE_ANNOTATION] = "137"
        elif not fail:
            labels[kwok.RESULT_LABEL] = "succeed"
    return out


class History:
    """Every pod uid per job and every status per job, from a watch in a thread."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube
        self.pods: dict[str, set[str]] = defaultdict(set)
        self.statuses: dict[str, list[Obj]] = defaultdict(list)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._follow, args=(res,), daemon=True)
                         for res in (resources.PODS, resources.PYTORCHJOBS)]

    def __enter__(self) -> History:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()

    def _follow(self, res: resources.Resource) -> None:
        for kind, obj in watched(self.kube, res, NAMESPACE, self._stop):
            meta = obj.get("metadata") or {}
            if kind in ("ADDED", "MODIFIED") and res is resources.PODS:
                job_name = (meta.get("labels") or {}).get(LABEL_JOB_NAME)
                if job_name:
                    self.pods[job_name].add(str(meta["uid"]))
            elif kind in ("ADDED", "MODIFIED"):
                self.statuses[str(meta["name"])].append(obj.get("status") or {})


def regressions(statuses: list[Obj]) -> list[str]:
    found: list[str] = []
    finished: tuple[str, str | None] | None = None
    created = False
    for status in statuses:
        true = {c["type"] for c in status.get("conditions") or [] if c["status"] == "True"}
        if created and "Created" not in true:
            found.append("Created lost")
        created = created or "Created" in true
        if finished is not None:
            if finished[0] not in true:
                found.append(f"{finished[0]} lost")
            if status.get("completionTime") != finished[1]:
                found.append("completionTime changed")
        for end in ("Succeeded", "Failed"):
            if finished is None and end in true:
                finished = (end, status.get("completionTime"))
    return found


def _await_event_path(kube: KubeClient, stack: DevStack, timeout: float = 60.0) -> None:
    """Wait until the adapter's watches deliver: it reports ready before they start, and with
    the resync off a job created in that gap would never be heard of. Each kind's watch starts
    on its own, so a probe of each kind the test relies on at its start (a labelled Service,
    which the reconcile Trigger takes, and a suspended PyTorchJob) is created and deleted until
    an event for it arrives."""
    router = stack.router
    assert router is not None
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "event-path-probe", "namespace": NAMESPACE,
                            "labels": {LABEL_JOB_NAME: "event-path-probe"}},
               "spec": {"clusterIP": "None", "selector": {"probe": "none"}}}
    probe_job = copy.deepcopy(sample("PyTorchJob"))
    probe_job["metadata"] = {"name": "event-path-probe", "namespace": NAMESPACE}
    probe_job["spec"].setdefault("runPolicy", {})["suspend"] = True
    for obj, res in ((service, resources.SERVICES), (probe_job, resources.PYTORCHJOBS)):
        # the adapter's subject: /apis/<apiVersion>/namespaces/<ns>/<plural>/<name>
        subject = f"/apis/{res.api_version}/namespaces/{NAMESPACE}/{res.plural}/event-path-probe"

        def delivered(obj: Obj = obj, res: resources.Resource = res,
                      subject: str = subject) -> bool:
            before = len(router.deliveries)
            kube.create(copy.deepcopy(obj), res=res)
            kube.delete(res, "event-path-probe", NAMESPACE)
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline:
                if any(d.subject == subject for d in list(router.deliveries)[before:]):
                    return True
                time.sleep(0.1)
            return False

        wait_for(delivered, timeout, 0.1, f"the event path to deliver a {res.kind}")
        def gone(res: resources.Resource = res) -> bool:
            return kube.get(res, "event-path-probe", NAMESPACE) is None

        wait_for(gone, 30, 0.1, f"the probe {res.kind} gone")


def _unfinished(kube: KubeClient, stack: DevStack) -> str:
    """Each unfinished job as it stands (conditions, restarts, pods) and what the event path
    did: what a timeout needs to be understood."""
    lines = []
    for obj in kube.list(resources.PYTORCHJOBS, NAMESPACE):
        conditions = [(c["type"], c["status"]) for c in obj.get("status", {}).get("conditions")
                      or []]
        if any(t in ("Succeeded", "Failed") and s == "True" for t, s in conditions):
            continue
        name = obj["metadata"]["name"]
        pods = [(p["metadata"]["name"], p["metadata"]["uid"][:8], p.get("status", {}).get("phase"),
                 bool(p["metadata"].get("deletionTimestamp")))
                for p in kube.list(resources.PODS, NAMESPACE,
                                   label_selector=f"{LABEL_JOB_NAME}={name}")]
        lines.append(f"{name}: {conditions} annotations="
                     f"{obj['metadata'].get('annotations')} pods={pods}")
    router = stack.router
    if router is not None:
        deliveries = list(router.deliveries)
        lines.append(f"deliveries {len(deliveries)}, retried "
                     f"{sum(1 for d in deliveries if d.attempts > 1)}, dead letters "
                     f"{len(router.dead_letters)}: {list(router.dead_letters)[:5]}")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def stack(bin_dir: Path) -> Iterator[DevStack]:
    dev = DevStack(bin_dir, resync_interval=0, replicas=REPLICAS,
                   function_env={"FUNCTIONS_API_FAULTS": FAULTS}, broker="emulated")
    dev.start()
    try:
        yield dev
    finally:
        dev.stop()


def test_replicas_under_faults_end_every_job_exactly_right(stack: DevStack) -> None:
    assert stack.cluster is not None
    kube = stack.cluster.client()
    assert all(len(urls) == REPLICAS for urls in stack.replica_urls.values())
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
                res=resources.NAMESPACES)
    _await_event_path(kube, stack)
    names = {f"ok-{i}": False for i in range(SUCCEEDING)} | {
        f"fail-{i}": True for i in range(FAILING)}
    with History(kube) as history:
        for name, fail in names.items():
            kube.create(job(name, fail), res=resources.PYTORCHJOBS)

        def finished() -> bool:
            jobs = kube.list(resources.PYTORCHJOBS, NAMESPACE)
            return len(jobs) == len(names) and all(
                condition(j, "Succeeded").get("status") == "True"
                or condition(j, "Failed").get("status") == "True" for j in jobs)

        try:
            wait_for(finished, 180, 0.5, "every job finished through events alone")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; unfinished:\n{_unfinished(kube, stack)}") from None
        jobs = {j["metadata"]["name"]: j for j in kube.list(resources.PYTORCHJOBS, NAMESPACE)}
    for name, fail in names.items():
        obj = jobs[name]
        restarts = int((obj["metadata"].get("annotations") or {}).get(RESTARTS_ANNOTATION, "0"))
        end = "Failed" if fail else "Succeeded"
        assert condition(obj, end).get("status") == "True", (name, obj.get("status"))
        assert restarts == (BACKOFF_LIMIT if fail else 0), (name, restarts)
        # Each restart made exactly one new pod, but the last of a job that failed on its
        # backoffLimit: no duplicate, no count lost or doubled.
        expected = 2 + restarts - (1 if fail else 0)
        assert len(history.pods[name]) == expected, (name, restarts, history.pods[name])
        assert regressions(history.statuses[name]) == [], name
    for name in names:
        kube.delete(resources.PYTORCHJOBS, name, NAMESPACE)
    wait_for(lambda: not kube.list(resources.PYTORCHJOBS, NAMESPACE)
             and not kube.list(resources.PODS, NAMESPACE), 60, 0.5, "jobs and pods gone")

"""Drive the training-job handlers against the local cluster, the way the runtime would.

``JobDriver.run_until`` calls reconcile, status and gc for one job in a loop (as events and
resyncs would) until a predicate on the cluster holds; kwok moves the pods along.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from devstack.cluster import kwok
from functions.core.keys import ObjectKey
from functions.jobs.controller import CONTROLLERS, RESOURCES
from functions.kube import resources
from functions.kube.client import KubeClient
from functions.kube.resources import Resource
from functions.runtime.recorder import EventRecorder
from functions.runtime.registry import Context, Controller, FunctionName

SAMPLES = Path(__file__).resolve().parents[2] / "config" / "samples"
Obj = dict[str, Any]


def sample(kind: str) -> Obj:
    text = (SAMPLES / f"{kind.lower()}.yaml").read_text()
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    return data


def specs_of(job: Obj) -> dict[str, Obj]:
    spec = job["spec"]
    key = next(k for k in spec if k.endswith("ReplicaSpecs"))
    specs = spec[key]
    assert isinstance(specs, dict)
    return specs


def for_test(job: Obj, name: str, namespace: str) -> Obj:
    """A sample renamed into the test namespace."""
    out = copy.deepcopy(job)
    out["metadata"] = {"name": name, "namespace": namespace}
    return out


def controller(kind: str) -> Controller:
    return next(c for c in CONTROLLERS if c.parent.kind == kind)


class JobDriver:
    def __init__(self, kube: KubeClient, job: Obj) -> None:
        self.kube = kube
        self.kind = str(job["kind"])
        self.res = RESOURCES[self.kind]
        self.name = str(job["metadata"]["name"])
        self.namespace = str(job["metadata"]["namespace"])
        self.key = ObjectKey(self.res.api_version, self.kind, self.namespace, self.name)
        self.controller = controller(self.kind)
        self.recorder = EventRecorder(kube, "training-jobs")
        self.seen_conditions: list[tuple[str, str]] = []
        self.created: Obj = {}

    def context(self, function: FunctionName) -> Context:
        return Context(self.kube, self.recorder, function)

    def create(self, job: Obj) -> Obj:
        """Create ``job`` through the API version it names (MPIJob: v1 or v2beta1, which
        decides its semantics); the driver reads it through the handlers' version."""
        group, _, version = str(job.get("apiVersion") or self.res.api_version).rpartition("/")
        res = Resource(group, version, self.res.plural, self.kind)
        self.created = self.kube.create(job, res=res)
        return self.created

    def call(self, function: FunctionName) -> None:
        self.controller.handlers[function](self.context(function), self.key)

    def step(self) -> None:
        for function in ("reconcile", "status", "gc"):
            self.call(function)
        job = self.get()
        for cond in ((job or {}).get("status") or {}).get("conditions") or []:
            seen = (cond["type"], cond["status"])
            if seen not in self.seen_conditions:
                self.seen_conditions.append(seen)

    def run_until(self, check: Callable[[], Any], timeout: float = 45.0,
                  what: str = "condition") -> Any:
        deadline = time.monotonic() + timeout
        while True:
            self.step()
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; job status: "
                                     f"{(self.get() or {}).get('status')}")
            time.sleep(0.2)

    # -- reading ------------------------------------------------------------------------------

    def get(self) -> Obj | None:
        return self.kube.get(self.res, self.name, self.namespace)

    def status(self) -> Obj:
        return dict((self.get() or {}).get("status") or {})

    def conditions(self) -> list[tuple[str, str, str]]:
        return [(c["type"], c["status"], c.get("reason", ""))
                for c in self.status().get("conditions") or []]

    def condition(self, type_: str) -> Obj | None:
        for cond in self.status().get("conditions") or []:
            if cond["type"] == type_ and cond["status"] == "True":
                return dict(cond)
        return None

    def pods(self) -> list[Obj]:
        return self.kube.list(resources.PODS, self.namespace,
                              label_selector=f"training.kubeflow.org/job-name={self.name}")

    def live_pods(self) -> list[Obj]:
        return [p for p in self.pods() if not p["metadata"].get("deletionTimestamp")]

    def pod(self, name: str) -> Obj | None:
        return self.kube.get(resources.PODS, name, self.namespace)

    def services(self) -> list[Obj]:
        return self.kube.list(resources.SERVICES, self.namespace,
                              label_selector=f"training.kubeflow.org/job-name={self.name}")

    def all_running(self, count: int) -> bool:
        pods = self.live_pods()
        return len(pods) == count and all(p["status"].get("phase") == "Running" for p in pods)

    def events(self) -> list[tuple[str, str]]:
        items = self.kube.list(resources.EVENTS, self.namespace)
        return [(e["reason"], e["message"]) for e in items
                if e["involvedObject"].get("name") == self.name]

    # -- steering pods through kwok -----------------------------------------------------------

    def finish_pod(self, name: str, result: str, exit_code: int | None = None) -> None:
        """Make a Running pod end: kwok's stages act on these labels/annotations."""
        meta: Obj = {"labels": {kwok.RESULT_LABEL: result},
                     "annotations": {kwok.DELAY_ANNOTATION: "100ms"}}
        if exit_code is not None:
            meta["annotations"][kwok.EXIT_CODE_ANNOTATION] = str(exit_code)
        self.kube.patch(resources.PODS, name, {"metadata": meta}, self.namespace)

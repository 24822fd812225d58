"""Random training-job CRs through admission: the samples with replica counts, restart and
clean-pod policies, replica types, containers, run policies and MPI/elastic settings replaced
by plausible and implausible values. The API server (CRD schemas and admission policies)
rejects some; every accepted one then goes through the reconcile, status and gc handlers, which
must never fail with an unhandled exception and must leave a trace a user can read (a status
condition or a Kubernetes Event).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from functions.core.keys import ObjectKey
from functions.jobs.controller import CONTROLLERS, RESOURCES
from functions.kube import resources
from functions.kube.client import ApiError, KubeClient
from functions.runtime.dispatch import Dispatcher
from functions.runtime.outcomes import Route
from functions.runtime.recorder import EventRecorder
from tests.fuzz.strategies import job_spec

pytestmark = pytest.mark.cluster

FUNCTIONS = ("reconcile", "status", "gc")
names = itertools.count()
tally: Counter[str] = Counter()


@pytest.fixture(scope="module")
def dispatchers(kube: KubeClient, crds: None) -> dict[str, Dispatcher]:
    recorder = EventRecorder(kube, "training-jobs")
    return {function: Dispatcher(function, CONTROLLERS, lambda: kube,  # type: ignore[arg-type]
                                 lambda: recorder)
            for function in FUNCTIONS}


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    yield
    print(f"admission fuzz: {dict(tally)}")


def traces(kube: KubeClient, obj: dict[str, Any]) -> list[str]:
    conditions = [str(c.get("type")) for c in (obj.get("status") or {}).get("conditions") or []]
    meta = obj["metadata"]
    events = kube.list(resources.EVENTS, meta["namespace"],
                       field_selector=f"involvedObject.name={meta['name']}")
    return conditions + [f"event:{e.get('reason')}" for e in events]


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(job=job_spec())
def test_random_job_specs_never_crash_a_handler(kube: KubeClient, namespace: str,
                                                dispatchers: dict[str, Dispatcher],
                                                job: dict[str, Any]) -> None:
    job["metadata"] = {"name": f"fuzz-{next(names)}", "namespace": namespace}
    res = RESOURCES[job["kind"]]
    try:
        created = kube.create(job, res=res)
    except ApiError as exc:
        rejected_status = exc.status
    else:
        rejected_status = 0
    if rejected_status:
        assert 400 <= rejected_status < 500
        tally["rejected"] += 1
        return
    tally["accepted"] += 1
    key = ObjectKey.of(created)
    controller = next(c for c in CONTROLLERS if c.parent.kind == job["kind"])
    for _ in range(2):
        for function in FUNCTIONS:
            outcome = dispatchers[function].run(Route(controller, key))
            assert outcome.kind in ("ok", "ignored") or outcome.cause == "temporary", (
                function, outcome)
    current = kube.get(res, key.name, key.namespace)
    assert current is not None
    found = traces(kube, current)
    assert found, f"no condition and no Event for {current.get('spec')}"
    tally["traced"] += 1

"""Due times survive a scale to zero, through the real Knative Eventing: a PyTorchJob's active
deadline and another's TTL come due while every function is stopped, and each is met within
the minute it falls in, by the wake PingSource the function made before it went
(functions/core/wakes.py).

The two due times are put in one minute M (their runPolicy patched once the jobs run and have
finished), so both wakes fire at M. Then, with no event in flight, the three functions are
scaled to zero (:mod:`devstack.activator`: a function at zero starts at the first event its
Trigger takes, as Knative's activator starts a pod). Nothing but the wakes may start them:
status must be started by its wake and gc by its own, both at M or later; the deadline job
fails and the finished job is deleted between its due time and M plus the delivery; the
wakes that fired are deleted.

It runs before ``test_unsent_changes.py`` (the package's modules run in name order): that test
deletes the status function's Trigger and makes it again, with a new OIDC ServiceAccount of
the same name, and the Broker's filter then sends the tokens it has cached for the old one,
which the status function refuses until the filter asks for new ones; a delivery of a wake to
status would be refused meanwhile.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bench.coldburst import _ready
from devstack.cluster import kwok
from devstack.stack import DevStack
from functions.core import wakes
from functions.core.times import parse_time
from functions.kube import resources
from functions.kube.client import KubeClient
from tests.chaos.scenario import succeeding_job
from tests.dev.e2e.conftest import NAMESPACE, attributes
from tests.support import condition, wait_for

Obj = dict[str, Any]
# An existing namespace: a new one would restart the ApiServerSource adapter, whose pods'
# events would then reach the functions, at zero, only through the Broker's retries.
TENANT = "default"
DEADLINE_JOB, TTL_JOB = "wake-deadline", "wake-ttl"
# A wake fires at second 0 of its minute; the Broker's retries reach a function a few seconds
# after it starts. What a due time may take beyond its minute:
SLACK = timedelta(seconds=30)
FUNCTIONS = ("reconcile", "gc", "status")


def _running_job() -> Obj:
    """The sample PyTorchJob, its pods running until they are deleted."""
    job = succeeding_job("PyTorchJob", TENANT)
    job["metadata"]["name"] = DEADLINE_JOB
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        meta = spec["template"]["metadata"]
        meta["labels"].pop(kwok.RESULT_LABEL)
        meta["annotations"].pop(kwok.DELAY_ANNOTATION)
    return job


def _finishing_job() -> Obj:
    job = succeeding_job("PyTorchJob", TENANT)
    job["metadata"]["name"] = TTL_JOB
    job["spec"].setdefault("runPolicy", {})["ttlSecondsAfterFinished"] = 3600
    return job


def _patch_run_policy(kube: KubeClient, name: str, field: str, seconds: int) -> None:
    kube.patch(resources.PYTORCHJOBS, name, {"spec": {"runPolicy": {field: seconds}}},
               TENANT)


def _wake_minutes(kube: KubeClient, function: str) -> list[datetime]:
    return sorted(m for m in (wakes.minute_of(s) for s in kube.list(
        resources.PINGSOURCES, NAMESPACE, label_selector=f"{wakes.FUNCTION_LABEL}={function}"))
        if m is not None)


def _quiet(stack: DevStack, seconds: float, timeout: float) -> None:
    """Wait until the Broker has accepted nothing for ``seconds``."""
    deadline = time.monotonic() + timeout
    count, since = len(stack.knative.events() if stack.knative else []), time.monotonic()
    while time.monotonic() - since < seconds:
        assert time.monotonic() < deadline, "the event path never went quiet"
        time.sleep(0.2)
        now = len(stack.knative.events() if stack.knative else [])
        if now != count:
            count, since = now, time.monotonic()


def _received(stack: DevStack) -> float:
    """Every event the functions have answered so far (their ``/metrics``)."""
    total = 0.0
    for function in FUNCTIONS:
        try:
            with urllib.request.urlopen(stack.function_urls[function] + "metrics",
                                        timeout=2) as response:
                text = response.read().decode()
        except OSError:
            continue
        total += sum(float(line.rpartition(" ")[2]) for line in text.splitlines()
                     if line.startswith("odh_training_events_total{"))
    return total


def _settled(stack: DevStack, quiet: float = 5.0, timeout: float = 120.0) -> None:
    """Wait until the functions have answered no event for ``quiet`` seconds: what the Broker
    was still retrying while they were at zero is in, and does not reach the next test."""
    deadline = time.monotonic() + timeout
    last, since = _received(stack), time.monotonic()
    while time.monotonic() - since < quiet and time.monotonic() < deadline:
        time.sleep(0.5)
        now = _received(stack)
        if now != last:
            last, since = now, time.monotonic()


@pytest.fixture
def at_zero(stack: DevStack) -> Iterator[DevStack]:
    """The stack, every function of which is started again (and ready) afterwards."""
    try:
        yield stack
    finally:
        for function in stack.at_zero():
            stack.wake_up(function)
        for function in FUNCTIONS:
            url = stack.function_urls[function]
            wait_for(lambda: _ready(url), 60, 0.2, f"{function} ready again")  # noqa: B023
        for name in (DEADLINE_JOB, TTL_JOB):
            if stack.cluster is not None:
                stack.cluster.client().delete(resources.PYTORCHJOBS, name, TENANT)
        _settled(stack)


def test_a_deadline_and_a_ttl_fire_on_time_with_every_function_at_zero(
        at_zero: DevStack, kube: KubeClient) -> None:
    stack = at_zero
    kube.create(_running_job(), res=resources.PYTORCHJOBS)
    kube.create(_finishing_job(), res=resources.PYTORCHJOBS)

    def job(name: str) -> Obj | None:
        return kube.get(resources.PYTORCHJOBS, name, TENANT)

    running = wait_for(lambda: (j := job(DEADLINE_JOB)) and condition(j, "Running").get(
        "status") == "True" and j, 60, 0.2, "the deadline job Running")
    finished = wait_for(lambda: (j := job(TTL_JOB)) and condition(j, "Succeeded").get(
        "status") == "True" and j, 60, 0.2, "the TTL job Succeeded")
    started = parse_time(running["status"]["startTime"])
    completed = parse_time(finished["status"]["completionTime"])
    assert started is not None and completed is not None

    # Both due times in the minute M, at least a minute and a half from now.
    minute = wakes.wake_minute(datetime.now(UTC) + timedelta(seconds=90))
    deadline_due, ttl_due = minute - timedelta(seconds=20), minute - timedelta(seconds=10)
    _patch_run_policy(kube, DEADLINE_JOB, "activeDeadlineSeconds",
                      int((deadline_due - started).total_seconds()))
    _patch_run_policy(kube, TTL_JOB, "ttlSecondsAfterFinished",
                      int((ttl_due - completed).total_seconds()))
    wait_for(lambda: minute in _wake_minutes(kube, "status")
             and minute in _wake_minutes(kube, "gc"), 30, 0.2,
             f"status and gc to make their wakes for {minute:%H:%M}")

    _quiet(stack, 3.0, 60)
    stopped = datetime.now(UTC)
    for function in FUNCTIONS:
        stack.scale_to_zero(function)
    print(f"every function at zero at {stopped:%H:%M:%S}; wakes at {minute:%H:%M}")

    def deleted_at() -> datetime | None:
        return datetime.now(UTC) if job(TTL_JOB) is None else None

    try:
        gone = wait_for(deleted_at, 150, 0.2, "the TTL job deleted")
        failed = wait_for(lambda: condition(job(DEADLINE_JOB), "Failed") or None, 90, 0.2,
                          "the deadline job Failed")
    except AssertionError:
        for component in stack.processes:
            if component.name in ("function-status", "function-gc"):
                print(f"--- {component.name} ---\n{component.tail(150)}")
        raise
    failed_at = parse_time(failed["lastTransitionTime"])
    assert failed_at is not None
    print(f"deadline due {deadline_due:%H:%M:%S}, failed {failed_at:%H:%M:%S}; "
          f"TTL due {ttl_due:%H:%M:%S}, deleted by {gone:%H:%M:%S}")
    assert "deadline" in failed["message"]
    assert deadline_due <= failed_at <= minute + SLACK
    assert ttl_due <= gone <= minute + SLACK

    # Only the wakes started status and gc, at M or later; nothing ran before.
    activations = {a.function: a for a in stack.activations() if a.at >= stopped.timestamp()}
    for function in ("status", "gc"):
        cause = activations[function]
        assert cause.attributes["type"] == "dev.knative.sources.ping", cause
        assert cause.attributes.get(wakes.EXTENSION) == function, cause
        assert cause.at >= minute.timestamp() - 1, cause
    pings = [attributes(e) for e in (stack.knative.events() if stack.knative else [])
             if attributes(e).get("type") == "dev.knative.sources.ping"]
    assert {p.get(wakes.EXTENSION) for p in pings} >= {"status", "gc"}
    # The wakes that fired are deleted once their passes succeeded.
    wait_for(lambda: not [m for f in ("status", "gc") for m in _wake_minutes(kube, f)
                          if m <= minute], 30, 0.5, "the fired wakes deleted")

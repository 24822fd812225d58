"""Fixtures of the chaos suites: the recorded stream and the state its clean replay ends in."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from devstack.cluster.runner import LocalCluster
from devstack.recording import RecordedRequest, read_recording
from functions.kube import resources
from functions.kube.client import KubeClient
from tests.chaos.replay import FunctionUnderTest, settle
from tests.chaos.scenario import (
    JOB_KINDS,
    RECORDING,
    apply_all,
    create_namespace,
    duplicate_pods,
    first_added,
    is_trainer_event,
    relocate,
    snapshot,
)

State = dict[str, Any]


@pytest.fixture(scope="session")
def recording() -> list[RecordedRequest]:
    events = read_recording(RECORDING)
    assert len(events) > 40, "the recording holds the whole scenario"
    return events


def jobs_stream(events: list[RecordedRequest], namespace: str) -> list[RecordedRequest]:
    """The jobs' events, moved into ``namespace``."""
    return [relocate(e, namespace) for e in events if not is_trainer_event(e)]


def replay_jobs(cluster: LocalCluster, kube: KubeClient, events: list[RecordedRequest],
                **mutation: Any) -> State:
    """Replay the jobs' events into a new namespace; the state after one resync."""
    namespace = f"replay-{uuid.uuid4().hex[:8]}"
    create_namespace(kube, namespace)
    stream = jobs_stream(events, namespace)
    apply_all(kube, first_added(stream, JOB_KINDS))
    function = FunctionUnderTest(lambda hook: cluster.client(on_request=hook))
    try:
        report = function.replay(stream, **mutation)
        assert not report.rejected, report
        settle(kube, [namespace])
        assert function.resync() == 202
        function.echo_writes(lambda: settle(kube, [namespace]))
        assert duplicate_pods(kube, namespace) == {}
        return snapshot(kube, [namespace])
    finally:
        function.close()
        kube.delete(resources.NAMESPACES, namespace)


@pytest.fixture(scope="session")
def clean_jobs_state(cluster: LocalCluster, kube: KubeClient, crds: None,
                     recording: list[RecordedRequest]) -> State:
    """The jobs' state after the clean replay (every job Succeeded)."""
    state = replay_jobs(cluster, kube, recording)
    finished = {k: v["conditions"] for k, v in state.items() if k.split()[0] in JOB_KINDS}
    assert len(finished) == 3
    assert all(("Succeeded", "True") in {(c[0], c[1]) for c in conditions}
               for conditions in finished.values()), finished
    return state

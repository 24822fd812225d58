"""The lifecycle's pure rules: which transitions a status shows, their ids, what is owed after
what was sent, the outbox patch, and the event's attributes and data."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from functions.jobs.core import lifecycle as core
from functions.jobs.core.frameworks import PYTORCH, TENSORFLOW
from hack.lifecycle_schema import render as render_schema
from tests.support import REPO

Obj = dict[str, Any]
T0 = "2026-01-01T00:00:00Z"


def at(second: int) -> str:
    return f"2026-01-01T00:00:{second:02d}Z"


def cond(type_: str, status: str = "True", second: int = 0, reason: str = "") -> Obj:
    return {"type": type_, "status": status, "lastTransitionTime": at(second),
            "reason": reason or type_, "message": f"{type_} message"}


def moment(second: int) -> datetime:
    return datetime(2026, 1, 1, 0, 0, second, tzinfo=UTC)


@pytest.mark.parametrize(("conditions", "shown"), [
    pytest.param([], [], id="no-status"),
    pytest.param([cond("Created", second=1)], [("created", 1)], id="created"),
    pytest.param([cond("Created", second=1), cond("Running", second=3)],
                 [("created", 1), ("running", 3)], id="running"),
    pytest.param([cond("Created", second=1), cond("Running", "False", 3),
                  cond("Succeeded", second=9)], [("created", 1), ("succeeded", 9)],
                 id="succeeded-running-false"),
    pytest.param([cond("Created", second=1), cond("Restarting", second=5)],
                 [("created", 1), ("restarting", 5)], id="restarting"),
    pytest.param([cond("Created", second=1), cond("Suspended", second=1)],
                 [("created", 1), ("suspended", 1)], id="created-suspended-same-second"),
    pytest.param([cond("Created", second=1), cond("Suspended", "False", 7)],
                 [("created", 1), ("resumed", 7)], id="resumed"),
    pytest.param([cond("Created", second=1), cond("Failed", second=4),
                  cond("Running", "False", 2)], [("created", 1), ("failed", 4)],
                 id="failed-in-time-order"),
    pytest.param([cond("Created", second=1), {"type": "Running", "status": "True"}],
                 [("created", 1)], id="no-transition-time-is-no-transition"),
    pytest.param([cond("Created", second=1), {**cond("Running"), "lastTransitionTime": "x"}],
                 [("created", 1)], id="unreadable-time"),
])
def test_transitions_follow_the_conditions(conditions: list[Obj],
                                           shown: list[tuple[str, int]]) -> None:
    found = core.transitions({"conditions": conditions})
    assert [(t.name, t.at.second) for t in found] == shown


def test_ids_tell_two_restarts_apart_and_are_stable() -> None:
    first = core.transitions({"conditions": [cond("Restarting", second=5)]})[0]
    second = core.transitions({"conditions": [cond("Restarting", second=9)]})[0]
    again = core.transitions({"conditions": [cond("Restarting", second=5)]})[0]
    ids = {core.event_id("uid-1", t) for t in (first, second, again)}
    assert ids == {f"uid-1/restarting/{at(5)}", f"uid-1/restarting/{at(9)}"}


SENT = {"created": moment(1), "running": moment(3)}


@pytest.mark.parametrize(("statuses", "sent", "since", "owed"), [
    pytest.param([{"conditions": [cond("Created", second=1)]}], {}, None, [("created", 1)],
                 id="nothing-sent"),
    pytest.param([{"conditions": [cond("Created", second=1)]}], {"created": moment(1)}, None,
                 [], id="already-sent"),
    pytest.param([{"conditions": [cond("Created", second=1), cond("Running", second=3)]},
                  {"conditions": [cond("Created", second=1), cond("Restarting", second=6)]}],
                 SENT, None, [("restarting", 6)], id="replaced-status-was-sent"),
    pytest.param([{"conditions": [cond("Created", second=1), cond("Running", second=3)]},
                  {"conditions": [cond("Created", second=1), cond("Restarting", second=6)]}],
                 {"created": moment(1)}, None, [("running", 3), ("restarting", 6)],
                 id="a-crashed-writer-left-running-unsent"),
    pytest.param([{"conditions": [cond("Created", second=1), cond("Running", second=8)]}],
                 SENT, None, [("running", 8)], id="running-again-after-a-restart"),
    pytest.param([{"conditions": [cond("Created", second=1), cond("Running", second=3)]}],
                 {}, moment(2), [("running", 3)], id="before-the-broker-is-not-owed"),
    pytest.param([{"conditions": [cond("Created", second=1)]},
                  {"conditions": [cond("Created", second=1)]}], {}, None, [("created", 1)],
                 id="each-once"),
])
def test_owed(statuses: list[Obj], sent: dict[str, datetime], since: datetime | None,
              owed: list[tuple[str, int]]) -> None:
    assert [(t.name, t.at.second) for t in core.owed(statuses, sent, since)] == owed


@pytest.mark.parametrize(("annotation", "record"), [
    pytest.param(None, {}, id="absent"),
    pytest.param('{"created":"2026-01-01T00:00:01Z"}', {"created": moment(1)}, id="read"),
    pytest.param("not json", {}, id="unreadable"),
    pytest.param('["created"]', {}, id="not-an-object"),
    pytest.param('{"created":"x","bogus":"2026-01-01T00:00:01Z","running":3}', {},
                 id="bad-entries-dropped"),
])
def test_sent_record(annotation: str | None, record: dict[str, datetime]) -> None:
    annotations = {} if annotation is None else {core.SENT_ANNOTATION: annotation}
    assert core.sent_record(annotations) == record


def test_sent_patch_keeps_the_latest_of_each_transition() -> None:
    delivered = core.transitions({"conditions": [cond("Running", second=2),
                                                 cond("Restarting", second=6)]})
    patch = core.sent_patch({"created": moment(1), "running": moment(3)}, delivered)
    record = json.loads(patch["metadata"]["annotations"][core.SENT_ANNOTATION])
    assert record == {"created": at(1), "running": at(3), "restarting": at(6)}
    assert core.sent_record({core.SENT_ANNOTATION: json.dumps(record)}) == {
        "created": moment(1), "running": moment(3), "restarting": moment(6)}


def job(**status: Any) -> Obj:
    return {"metadata": {"name": "mnist", "namespace": "team-a", "uid": "uid-1",
                         "creationTimestamp": T0,
                         "annotations": {"training.opendatahub.io/restarts": "1"}},
            "status": status}


def pod(name: str, rtype: str, container: str, exit_code: int | None) -> Obj:
    state = {"terminated": {"exitCode": exit_code, "reason": "Error"}} if exit_code is not None \
        else {"running": {}}
    return {"metadata": {"name": name, "labels": {"training.kubeflow.org/replica-type": rtype}},
            "status": {"containerStatuses": [{"name": container, "state": state},
                                             {"name": "sidecar",
                                              "state": {"terminated": {"exitCode": 2}}}]}}


def test_the_event_of_a_failure() -> None:
    status = {"conditions": [cond("Created", second=1), cond("Failed", second=30)],
              "startTime": at(4), "completionTime": at(30),
              "replicaStatuses": {"Worker": {"failed": 1}}}
    [_, failed] = core.transitions(status)
    pods = [pod("mnist-worker-1", "worker", "tensorflow", None),
            pod("mnist-worker-0", "worker", "tensorflow", 137)]
    attributes, data = core.lifecycle_event(TENSORFLOW, job(**status), failed, 1, pods)
    assert attributes == {
        "specversion": "1.0", "id": f"uid-1/failed/{at(30)}",
        "type": "org.opendatahub.training.job.failed",
        "source": "/apis/kubeflow.org/v1/namespaces/team-a/tfjobs/mnist", "subject": "mnist",
        "time": at(30), "datacontenttype": "application/json", "jobkind": "TFJob",
        "jobnamespace": "team-a", "jobname": "mnist", "framework": "tensorflow"}
    wire = json.loads(data.model_dump_json(exclude_none=True))
    assert wire == {
        "transition": "failed", "kind": "TFJob", "apiVersion": "kubeflow.org/v1",
        "framework": "tensorflow", "namespace": "team-a", "name": "mnist", "uid": "uid-1",
        "time": at(30), "reason": "Failed", "message": "Failed message", "restarts": 1,
        "replicaStatuses": {"Worker": {"failed": 1}}, "startTime": at(4),
        "completionTime": at(30),
        "exitCodes": [{"pod": "mnist-worker-0", "replicaType": "worker",
                       "container": "tensorflow", "exitCode": 137, "reason": "Error"}],
        "durations": {"queuedSeconds": 4.0, "runningSeconds": 26.0}}


def test_running_carries_the_time_to_running_and_no_exit_codes() -> None:
    status = {"conditions": [cond("Created", second=1), cond("Running", second=12)],
              "startTime": at(2)}
    running = core.transitions(status)[-1]
    _, data = core.lifecycle_event(PYTORCH, job(**status), running, 0,
                                   [pod("mnist-master-0", "master", "pytorch", 1)])
    assert data.exit_codes == []
    assert data.durations.to_running_seconds == 12.0
    assert data.durations.running_seconds is None


@pytest.mark.parametrize(("status", "ttl", "expected"), [
    pytest.param({"completionTime": at(30)}, 5, at(35), id="completion-plus-ttl"),
    pytest.param({}, 5, None, id="not-completed"),
])
def test_the_deletion_is_named_by_when_it_was_due(status: Obj, ttl: int,
                                                  expected: str | None) -> None:
    deleted = core.deletion(status, ttl)
    assert (deleted.stamp if deleted else None) == expected
    if deleted is not None:
        assert core.event_id("uid-1", deleted) == f"uid-1/deleted/{expected}"


# -- the schema in docs/ ------------------------------------------------------------------------

SCHEMA_FILE = REPO / "docs" / "lifecycle-event.schema.json"
RECORDED = REPO / "tests" / "data" / "recordings" / "lifecycle-pytorchjob.jsonl"


def validator() -> Draft202012Validator:
    schema = json.loads(SCHEMA_FILE.read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def test_the_committed_schema_is_the_models() -> None:
    """Regenerate with ``python -m hack.lifecycle_schema``."""
    assert SCHEMA_FILE.read_text() == render_schema()


def test_a_recorded_life_matches_the_schema() -> None:
    """One PyTorchJob's events as the tenant's sink received them through the real Broker
    (tests/dev/e2e/test_lifecycle.py keeps them with ``UPDATE_RECORDINGS=1``)."""
    check = validator()
    lines = [json.loads(line) for line in RECORDED.read_text().splitlines()]
    types = []
    for line in lines:
        headers = {k.lower(): v for k, v in line["headers"].items()}
        data = json.loads(line["body"])
        assert list(check.iter_errors(data)) == []
        assert headers["ce-type"] == core.TYPE_PREFIX + data["transition"]
        assert headers["ce-id"].startswith(f"{data['uid']}/{data['transition']}/")
        types.append(data["transition"])
    assert types == ["created", "running", "succeeded", "deleted"]


def test_the_documented_example_matches_the_schema() -> None:
    text = (REPO / "docs" / "lifecycle.md").read_text()
    [example] = re.findall(r"```json\n(.*?)\n```", text, re.S)
    assert list(validator().iter_errors(json.loads(example))) == []


@pytest.mark.parametrize("broken", [
    pytest.param({"uid": None}, id="uid-missing"),
    pytest.param({"transition": "exploded"}, id="unknown-transition"),
    pytest.param({"exitCodes": [{"pod": "p"}]}, id="exit-code-incomplete"),
])
def test_the_schema_refuses_what_the_model_refuses(broken: Obj) -> None:
    lines = RECORDED.read_text().splitlines()
    data = {**json.loads(json.loads(lines[0])["body"]), **broken}
    data = {k: v for k, v in data.items() if v is not None}
    assert list(validator().iter_errors(data)) != []

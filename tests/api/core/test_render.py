"""The CLI's text views."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from functions.api.core import render

NOW = datetime(2026, 1, 1, 0, 10, 0, tzinfo=UTC)


def job(name: str, state: str, position: int | None = None, **replicas: tuple[int, int, int]
        ) -> dict[str, Any]:
    return {"name": name, "framework": "pytorch", "kind": "PyTorchJob", "state": state,
            "createdAt": "2026-01-01T00:05:00Z",
            "queue": {"admission": "queue", "name": "default", "priority": 2,
                      "position": position},
            "replicas": {k: {"desired": d, "active": a, "succeeded": s, "failed": 0}
                         for k, (d, a, s) in replicas.items()},
            "conditions": [{"type": "Created", "status": "True", "reason": "R", "message": "m"}]}


def test_table() -> None:
    text = render.table([job("a", "Queued", 1, Master=(1, 0, 0)),
                         job("bb", "Running", None, Master=(1, 1, 0), Worker=(2, 1, 0))], NOW)
    assert text.splitlines() == [
        "NAME  FRAMEWORK  STATE    QUEUE  REPLICAS  AGE",
        "a     pytorch    Queued   #1 p2  0/1       5m",
        "bb    pytorch    Running  -      2/3       5m",
    ]


@pytest.mark.parametrize(("done", "running", "total", "expected"), [
    pytest.param(0, 0, 4, "[" + "." * 20 + "]", id="nothing"),
    pytest.param(1, 1, 4, "[#####>>>>>..........]", id="partial"),
    pytest.param(4, 0, 4, "[" + "#" * 20 + "]", id="done"),
    pytest.param(0, 0, 0, "[" + "." * 20 + "]", id="no-replicas"),
])
def test_bar(done: int, running: int, total: int, expected: str) -> None:
    assert render.bar(done, running, total) == expected


def test_watch_frame_and_finish() -> None:
    jobs = [job("a", "Succeeded", Master=(1, 0, 1)), job("b", "Queued", 2, Master=(1, 0, 0))]
    frame = render.watch_frame(jobs, "team", NOW, ["gone"])
    assert frame.startswith("training jobs in team: 1/2 finished  (00:10:00)\n")
    assert "queue default (queue), priority 2, position 2" in frame
    assert "Master     [####################] 0 running, 1 done, 0 failed of 1" in frame
    assert frame.endswith("gone: not found\n")
    assert not render.all_finished(jobs)
    assert render.all_finished(jobs[:1])
    assert not render.all_finished([])


def test_wide_table_across_namespaces() -> None:
    failed = job("bb", "Failed", None, Master=(1, 0, 0))
    failed["namespace"] = "team-b"
    failed["replicas"]["Master"]["failed"] = 1
    failed["conditions"].append({"type": "Failed", "status": "True",
                                 "reason": "PyTorchJobFailed", "message": "m"})
    queued = job("a", "Queued", 1, Master=(1, 0, 0))
    queued["namespace"] = "team-a"
    text = render.table([queued, failed], NOW, wide=True, namespaces=True)
    assert text.splitlines() == [
        "NAMESPACE  NAME  FRAMEWORK  STATE   QUEUE  REPLICAS  AGE  KIND        PRIORITY  "
        "FAILED  REASON",
        "team-a     a     pytorch    Queued  #1 p2  0/1       5m   PyTorchJob  2         "
        "0       R",
        "team-b     bb    pytorch    Failed  -      0/1       5m   PyTorchJob  2         "
        "1       PyTorchJobFailed",
    ]


@pytest.mark.parametrize(("position", "admission", "column"), [
    pytest.param(3, "queue", "#3 p2", id="position-from-the-api"),
    pytest.param(None, "queue", "queued p2", id="no-position-read-from-the-cr"),
    pytest.param(None, "kueue", "kueue:default", id="kueue"),
])
def test_queue_column(position: int | None, admission: str, column: str) -> None:
    queued = job("a", "Queued", position, Master=(1, 0, 0))
    queued["queue"]["admission"] = admission
    assert render.table([queued], NOW).splitlines()[1].split()[3:-2] == column.split()


@pytest.mark.parametrize(("kind", "reference"), [
    pytest.param("PyTorchJob", "pytorchjob.kubeflow.org/a", id="pytorchjob"),
    pytest.param("MPIJob", "mpijob.kubeflow.org/a", id="mpijob"),
    pytest.param("TrainJob", "trainjob.trainer.kubeflow.org/a", id="trainjob"),
    pytest.param("Unknown", "unknown/a", id="a-kind-of-no-group-known"),
])
def test_reference_is_kubectls_name(kind: str, reference: str) -> None:
    assert render.reference({"kind": kind, "name": "a"}) == reference


@pytest.mark.parametrize("fmt", [pytest.param("json", id="json"), pytest.param("yaml", id="yaml")])
def test_documents_read_back_as_they_were(fmt: str) -> None:
    data = {"items": [job("a", "Queued", 1, Master=(1, 0, 0))]}
    text = render.document(data, fmt)
    assert (json.loads(text) if fmt == "json" else yaml.safe_load(text)) == data
    assert not text.endswith("\n")


def test_details_and_frames_name_the_namespace_across_namespaces() -> None:
    one = job("a", "Running", None, Master=(1, 1, 0))
    one["namespace"] = "team-a"
    assert render.details(one, NOW, namespaced=True).startswith("team-a/a  PyTorchJob  Running")
    frame = render.watch_frame([one], None, NOW, [], wide=True)
    assert frame.startswith("training jobs in all namespaces: 0/1 finished")
    assert "NAMESPACE  NAME" in frame


@pytest.mark.parametrize(("problem", "status", "line"), [
    pytest.param({"detail": "runtime: no runtime r",
                  "errors": [{"field": "runtime", "message": "no runtime r"}]}, 422,
                 "runtime: no runtime r (422)", id="field-already-in-the-detail"),
    pytest.param({"detail": "invalid request: workers, env.1X",
                  "errors": [{"field": "workers", "message": "too small"},
                             {"field": "env.1X", "message": "bad name"}]}, None,
                 "invalid request: workers, env.1X: workers: too small; env.1X: bad name",
                 id="fields-appended-no-status"),
    pytest.param({"title": "Not Found", "status": 404}, None, "Not Found (404)",
                 id="title-and-status-of-the-document"),
])
def test_problem_line(problem: dict[str, Any], status: int | None, line: str) -> None:
    assert render.problem_line(problem, status) == line

"""The CLI's text views."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

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

"""Recording and replay: the file format, the sink, and seeded stream mutations."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from devstack.recording import (
    JsonlWriter,
    RecordedRequest,
    mutate,
    read_recording,
    record_sink,
    replay,
)
from functions.runtime.sender import post_event
from tests.core.test_events import SAMPLES, load_sample
from tests.runtime import controllers
from tests.runtime.test_app import MNIST
from tests.runtime.test_serve import write_kubeconfig

STREAM = [RecordedRequest({"Ce-Id": str(i)}, str(i).encode()) for i in range(200)]


def ids(events: list[RecordedRequest]) -> list[str]:
    return [event.headers["Ce-Id"] for event in events]


@pytest.mark.parametrize("options", [
    pytest.param({"shuffle": True}, id="shuffle"),
    pytest.param({"duplicate": 0.3}, id="duplicate"),
    pytest.param({"drop": 0.3}, id="drop"),
    pytest.param({"shuffle": True, "duplicate": 0.2, "drop": 0.3}, id="all"),
])
def test_mutations_are_deterministic_by_seed(options: dict[str, object]) -> None:
    first = ids(mutate(STREAM, seed=7, **options))  # type: ignore[arg-type]
    assert first == ids(mutate(STREAM, seed=7, **options))  # type: ignore[arg-type]
    assert first != ids(mutate(STREAM, seed=8, **options))  # type: ignore[arg-type]


def test_what_each_mutation_does() -> None:
    original = ids(STREAM)
    shuffled = ids(mutate(STREAM, shuffle=True, seed=1))
    assert sorted(shuffled) == sorted(original) and shuffled != original

    dropped = ids(mutate(STREAM, drop=0.3, seed=1))
    assert 0.2 * len(STREAM) < len(STREAM) - len(dropped) < 0.4 * len(STREAM)
    assert dropped == [i for i in original if i in set(dropped)]  # order kept

    duplicated = ids(mutate(STREAM, duplicate=0.3, seed=1))
    counts = Counter(duplicated)
    assert set(counts) == set(original)
    assert set(counts.values()) == {1, 2}
    assert 0.2 * len(STREAM) < len(duplicated) - len(STREAM) < 0.4 * len(STREAM)
    for event_id in (i for i, n in counts.items() if n == 2):
        first, second = (n for n, e in enumerate(duplicated) if e == event_id)
        assert second > first  # a duplicate arrives after the original

    assert ids(mutate(STREAM, drop=1.0, seed=1)) == []
    assert ids(mutate(STREAM, seed=1)) == original


def test_jsonl_round_trip_keeps_bytes(tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    writer = JsonlWriter(out)
    binary = RecordedRequest({"Ce-Id": "1", "Content-Type": "application/json"}, b'{"a":1}')
    raw = RecordedRequest({"Ce-Id": "2"}, b"\xff\x00not utf-8", path="/ns/broker")
    writer(binary)
    writer(raw)
    writer.close()
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[0]["body"] == '{"a":1}' and "body_base64" in lines[1]
    again = read_recording(out)
    assert [(e.headers, e.body, e.path) for e in again] == [
        (binary.headers, binary.body, "/"), (raw.headers, raw.body, "/ns/broker")]


def test_a_credential_is_never_recorded_nor_sent_again(tmp_path: Path) -> None:
    """The Broker's bearer token (which a recorder or the router's ingress may be sent) stays
    out of a recording and of what is forwarded or replayed."""
    out = tmp_path / "events.jsonl"
    writer = JsonlWriter(out)
    event = RecordedRequest({"Ce-Id": "1", "Authorization": "Bearer secret-token"}, b"{}")
    writer(event)
    writer.close()
    assert "secret-token" not in out.read_text()
    assert event.event_headers() == {"Ce-Id": "1"}


def test_samples_read_as_recordings() -> None:
    [event] = read_recording(SAMPLES / "02-captured-resource-update-pytorchjob-status.http.json")
    headers, body = load_sample("02-captured-resource-update-pytorchjob-status.http.json")
    assert event.body == body
    assert event.event_headers() == headers


def test_record_sink_captures_requests_as_received(tmp_path: Path) -> None:
    out = tmp_path / "captured.jsonl"
    sink, writer = record_sink(out)
    headers, body = load_sample("01-captured-resource-add-clusterscoped-trainer.http.json")
    try:
        assert post_event(sink.url, headers, body).status == 202
    finally:
        sink.stop()
        writer.close()
    [captured] = read_recording(out)
    assert captured.body == body
    assert captured.headers["Ce-Namespace"] == ""
    assert captured.event_headers() == headers
    assert captured.received


def test_replay_retries_like_a_broker() -> None:
    answers = iter([(503, 2.0), (None, None), (202, None), (400, None), (202, None)])
    sent: list[str] = []
    waits: list[float] = []

    def sender(request: RecordedRequest) -> tuple[int | None, float | None]:
        sent.append(request.headers["Ce-Id"])
        return next(answers)

    report = replay(STREAM[:3], sender, retries=5, backoff=0.1, sleep=waits.append)
    assert sent == ["0", "0", "0", "1", "2"]
    assert waits == [2.0, 0.4]  # Retry-After, then the exponential backoff
    assert (report.sent, report.accepted, report.attempts) == (3, 2, 5)
    assert report.rejected == [(1, 400)]


def test_replay_in_process(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from devstack.recording import in_process_sender

    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.setenv("FUNCTIONS_CONTROLLER_MODULES", "tests.runtime.controllers")
    monkeypatch.setenv("FUNCTIONS_DELIVERY_AUTH", "oidc")  # the events carry no token
    controllers.CALLS.seen.clear()
    events = read_recording(SAMPLES / "03-captured-resource-delete-pytorchjob.http.json")
    report = replay(events, in_process_sender("status"), duplicate=1.0)
    assert (report.sent, report.accepted) == (2, 2)
    assert controllers.CALLS.keys("status") == [MNIST, MNIST]

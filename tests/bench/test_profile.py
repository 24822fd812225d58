"""The profile report's pure parts: parsing py-spy's raw output and putting samples in
categories."""

from __future__ import annotations

import pytest

from bench.profile import OTHER, categorise, markdown, parse_raw, summarise

ROOT = "EventWorker.handle_request (functions/runtime/worker.py:1)"


@pytest.mark.parametrize(("frames", "category"), [
    pytest.param([ROOT, "handle (functions/runtime/dispatch.py:9)",
                  "status (functions/jobs/controller.py:99)",
                  "apply_status (functions/kube/client.py:5)", "send (urllib3/connection.py:3)"],
                 "API client (HTTP, JSON)", id="request-made-by-a-handler"),
    pytest.param([ROOT, "handle (functions/runtime/dispatch.py:9)",
                  "status_of (functions/jobs/core/plan.py:40)"],
                 "handlers (read, plan, status)", id="handler-logic"),
    pytest.param([ROOT, "answer (functions/runtime/endpoint.py:1)"],
                 "runtime (route, coalesce, answer)", id="runtime"),
    pytest.param([ROOT, "parse (gunicorn/http/parser.py:2)"], "HTTP serving (gunicorn, WSGI)",
                 id="gunicorn"),
    pytest.param(["EventWorker.handle (functions/runtime/worker.py:1)",
                  "ThreadWorker.handle (gunicorn/workers/gthread.py:2)",
                  "Request.parse (gunicorn/http/message.py:3)",
                  "DeadlineSocket.recv (functions/runtime/worker.py:4)"],
                 "HTTP serving (gunicorn, WSGI)", id="the-server-reading-a-request-head"),
    pytest.param([ROOT, "RequestSlots.__call__ (functions/runtime/worker.py:2)"],
                 "HTTP serving (gunicorn, WSGI)", id="the-worker-calling-the-app"),
    pytest.param([ROOT, "send (functions/kube/transport.py:4)",
                  "read_body (functions/kube/pools.py:5)"],
                 "API client (HTTP, JSON)", id="the-client-reading-an-answer-head"),
    pytest.param(["_run (functions/kube/cache.py:1)", "watch (functions/kube/client.py:2)"],
                 "API client (HTTP, JSON)", id="watch-stream-read"),
    pytest.param([ROOT, "call (functions/kube/client.py:3)",
                  "getresponse (urllib3/connection.py:4)", "parse_headers (http/client.py:5)",
                  "feed (email/feedparser.py:6)"],
                 "API client (HTTP, JSON)", id="parsing-an-answer-head"),
    pytest.param(["_run (functions/kube/cache.py:1)", "put (functions/kube/store.py:2)"],
                 "watch cache (decode, index)", id="cache-store"),
    pytest.param(["_send (functions/runtime/recorder.py:1)", "create (functions/kube/client.py:1)"],
                 "API client (HTTP, JSON)", id="event-write-is-a-request"),
    pytest.param(["_record (functions/runtime/recorder.py:1)"],
                 "events recorded (Event objects)", id="event-building"),
    pytest.param(["main (bench/burst.py:1)"], OTHER, id="other"),
])
def test_categorise(frames: list[str], category: str) -> None:
    assert categorise(frames) == category


def test_parse_and_summarise() -> None:
    text = ("a (x.py:1);status_of (functions/jobs/core/plan.py:2) 30\n"
            "a (x.py:1);parse (gunicorn/http/parser.py:2) 10\n"
            "garbage line\n")
    stacks = parse_raw(text)
    assert [count for _, count in stacks] == [30, 10]
    found = summarise(stacks, rate=10.0)
    assert found["seconds"] == 4.0
    assert found["categories"]["handlers (read, plan, status)"] == {"seconds": 3.0,
                                                                    "share": 0.75}
    assert found["top_frames"][0] == {"frame": "a (x.py)", "share": 1.0}
    report = markdown({"jobs": 5, "rate_hz": 10.0, "processes": {"status": found},
                       "burst": {"created_s": 1, "running_s": 2,
                                 "controller_cpu_s_at_end": 3, "deliveries": 4}})
    assert "| handlers (read, plan, status) | 3.0 | 75% |" in report


@pytest.mark.parametrize(("go", "expected"), [
    pytest.param({"API server under ours": {"seconds": 2.0, "categories": {
        "creates": {"seconds": 1.5, "share": 0.75}}}},
        ["### API server under ours: 2.0 s", "| creates | 1.5 | 75% |"], id="profiled"),
    pytest.param({"receive adapter odh-training-objects under ours": {"missing": "timeout"}},
                 ["### receive adapter odh-training-objects under ours", "Not profiled: timeout."],
                 id="one-missing"),
    pytest.param({"missing": "no `go` command to read the Go profiles with"},
                 ["Not profiled: no `go` command to read the Go profiles with."], id="no-go"),
])
def test_markdown_reports_the_go_profiles(go: dict[str, object], expected: list[str]) -> None:
    report = markdown({"jobs": 5, "rate_hz": 10.0, "processes": {}, "go": go,
                       "go_burst": {"created_s": 9.5},
                       "burst": {"created_s": 1, "running_s": 2,
                                 "controller_cpu_s_at_end": 3, "deliveries": 4}})
    assert "## Go processes" in report
    for line in expected:
        assert line in report.splitlines()


def test_markdown_reports_the_real_data_plane_beside() -> None:
    status = {"seconds": 1.5, "categories": {"handlers (read, plan, status)": {
        "seconds": 1.5, "share": 1.0}}, "top_frames": []}
    wall = {"seconds": 2.0, "categories": {"API requests (mostly waiting for the answer)": {
        "seconds": 2.0, "share": 1.0}}}
    burst = {"created_s": 1, "running_s": 2, "controller_cpu_s_at_end": 3, "deliveries": 4}
    report = markdown({"jobs": 5, "rate_hz": 10.0, "processes": {"status": status},
                       "wall": {"status": wall}, "go": {}, "burst": burst,
                       "knative": {"burst": {**burst, "created_s": 7},
                                   "processes": {"status": status},
                                   "wall": {"status": wall}}}).splitlines()
    assert "# The same on the real Knative data plane (ours-knative)" in report
    assert "## status: 1.5 s with the GIL" in report
    assert "## status (ours-knative): 1.5 s with the GIL" in report
    assert "### status (ours): 2.0 s in deliveries" in report
    assert "### status (ours-knative): 2.0 s in deliveries" in report

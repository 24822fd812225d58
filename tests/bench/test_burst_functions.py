"""bench.burst_functions: the functions' own figures of a burst, from their ``/metrics``.

The data files are two functions' metrics scraped at the end of a 200-job burst through the
real Knative data plane (their own series since renamed under the prefix ``odh_training_``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from bench import burst, burst_functions, report_burst
from devstack.cluster.ports import free_port

DATA = Path(__file__).parent / "data"
RECONCILE = (DATA / "reconcile-metrics.prom").read_text()
STATUS = (DATA / "status-metrics.prom").read_text()


@pytest.mark.parametrize(("texts", "expected"), [
    pytest.param({"reconcile": [RECONCILE]},
                 {"deliveries.reconcile": 681.0, "handler_s.reconcile": 16.051},
                 id="every-outcome-and-every-controller-counted"),
    pytest.param({"reconcile": [RECONCILE], "status": [STATUS]},
                 {"deliveries.reconcile": 681.0, "handler_s.reconcile": 16.051,
                  "deliveries.status": 1881.0, "handler_s.status": 27.247},
                 id="one-figure-set-per-function"),
    pytest.param({"status": [STATUS, STATUS]},
                 {"deliveries.status": 3762.0, "handler_s.status": 54.493},
                 id="replicas-add-up"),
    pytest.param({"gc": ["# nothing served yet\n"]},
                 {"deliveries.gc": 0.0, "handler_s.gc": 0.0}, id="no-event-yet"),
])
def test_figures(texts: dict[str, list[str]], expected: dict[str, float]) -> None:
    assert burst_functions.figures(texts) == expected


@pytest.fixture
def metrics_server() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = STATUS.encode() if self.path == "/metrics" else b""
            self.send_response(200 if body else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_scrape_leaves_out_a_function_that_does_not_answer(metrics_server: str) -> None:
    silent = f"http://127.0.0.1:{free_port()}/"
    found = burst_functions.scrape({"status": [metrics_server], "gc": [silent]}, timeout=2)
    assert found == {"deliveries.status": 1881.0, "handler_s.status": 27.247}


def test_per_job_and_the_report_line() -> None:
    runs = [{**run, "function_figures": figures} for run, figures in [
        (_run(), {"deliveries.reconcile": 600.0, "handler_s.reconcile": 15.0}),
        (_run(), {"deliveries.reconcile": 700.0, "handler_s.reconcile": 17.04,
                  "deliveries.gc": 460.0, "handler_s.gc": 0.7}),
    ]]
    summary = burst.summarise(runs)
    assert summary["function_figures"] == {"deliveries.gc": 230.0, "deliveries.reconcile": 650.0,
                                           "handler_s.gc": 0.35, "handler_s.reconcile": 16.02}
    assert burst_functions.per_job(summary["function_figures"], 200) == {
        "gc": {"deliveries": 1.15, "handler_s": 0.3},
        "reconcile": {"deliveries": 3.25, "handler_s": 16.0}}
    lines = report_burst.markdown_lines({"jobs_200": {"ours-knative": summary}})
    assert ("ours-knative: deliveries per job / handler time (s), by function: "
            "gc 1.15 / 0.3, reconcile 3.25 / 16.") in lines


def test_a_system_without_functions_has_no_such_line() -> None:
    summary = burst.summarise([_run()])
    assert "function_figures" not in summary
    lines = report_burst.markdown_lines({"jobs_200": {"go-tuned": summary}})
    assert not any("handler time" in line for line in lines)


def _run() -> dict[str, Any]:
    return {"jobs": 200, "created_s": 2.0, "running_s": 3.0, "jobs_not_created": 0,
            "jobs_not_running": 0, "create_errors": 0, "controller_peak_rss_mib": 50.0,
            "controller_requests": {"total": 3000, "by_verb": {"create": 3000}},
            "event_path_requests": {"total": 0}, "requests_by_user": {"op": 3000}}


@pytest.mark.parametrize(("after", "before", "expected"), [
    pytest.param({"deliveries.gc": 40.0, "handler_s.gc": 0.5},
                 {"deliveries.gc": 6.0, "handler_s.gc": 0.125},
                 {"deliveries.gc": 34.0, "handler_s.gc": 0.375}, id="the-run-alone"),
    pytest.param({"deliveries.gc": 40.0}, {}, {"deliveries.gc": 40.0},
                 id="not-scraped-before"),
])
def test_since(after: dict[str, float], before: dict[str, float],
               expected: dict[str, float]) -> None:
    assert burst_functions.since(after, before) == expected

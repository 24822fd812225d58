"""The wall-clock view of the deliveries: which samples are a request thread's, and what each
was doing or waiting for."""

from __future__ import annotations

import pytest

from bench import go_profile
from bench.profile_wall import WALL_CATEGORIES, markdown, request_stacks, summarise

HANDLE = "EventWorker.handle_request (functions/runtime/worker.py:341)"
SLOTS = "RequestSlots.__call__ (functions/runtime/worker.py:270)"
PASS = "Dispatcher._attempt (functions/runtime/dispatch.py:234)"


def category(frames: list[str]) -> str:
    return go_profile.categorise(reversed(frames), WALL_CATEGORIES)


@pytest.mark.parametrize(("frames", "expected"), [
    pytest.param([HANDLE, PASS, "status (functions/jobs/controller.py:191)",
                  "KubeClient.apply (functions/kube/client.py:212)",
                  "HttpTransport.send (functions/kube/transport.py:114)",
                  "HTTPConnection.getresponse (urllib3/connection.py:638)",
                  "SSLSocket.read (ssl.py:1167)"],
                 "API requests (mostly waiting for the answer)", id="waiting-for-a-write"),
    pytest.param([HANDLE, PASS, "HttpTransport.send (functions/kube/transport.py:140)",
                  "read_body (functions/kube/pools.py:265)",
                  "HTTPResponse.read (urllib3/response.py:980)"],
                 "API requests (mostly waiting for the answer)", id="reading-an-answer"),
    pytest.param([HANDLE, PASS, "reconcile (functions/jobs/controller.py:131)",
                  "execute (functions/jobs/writes.py:141)",
                  "_parallel (functions/jobs/writes.py:90)",
                  "_result_iterator (concurrent/futures/_base.py:619)",
                  "Condition.wait (threading.py:331)"],
                 "API requests (mostly waiting for the answer)", id="waiting-for-the-creates"),
    pytest.param([HANDLE, "Coalescer.run (functions/runtime/passes.py:104)",
                  "Condition.wait (threading.py:331)"],
                 "waiting for the running pass of the same job", id="coalesced"),
    pytest.param([HANDLE, "FunctionRuntime.view (functions/runtime/app.py:279)",
                  "Store.caught_up (functions/kube/store.py:127)",
                  "Condition.wait (threading.py:331)"],
                 "waiting for the watch cache to catch up", id="catching-up"),
    pytest.param([HANDLE, PASS, "status_of (functions/jobs/core/plan.py:54)"],
                 "handlers (read, plan, status)", id="handler-work"),
    pytest.param([HANDLE, "parse_event (functions/core/events.py:98)"],
                 "handlers (read, plan, status)", id="parsing-the-event"),
    pytest.param([HANDLE, "write (gunicorn/util.py:348)"],
                 "HTTP serving (gunicorn: read, parse, answer)", id="answering"),
    pytest.param([HANDLE, SLOTS, "EventEndpoint.__call__ (functions/runtime/endpoint.py:117)",
                  "read_body (functions/runtime/endpoint.py:95)",
                  "Body.read (gunicorn/http/body.py:290)",
                  "DeadlineSocket.recv (functions/runtime/worker.py:160)"],
                 "HTTP serving (gunicorn: read, parse, answer)", id="reading-the-body"),
])
def test_a_request_thread_sample_is_put_where_its_leaf_is(frames: list[str],
                                                          expected: str) -> None:
    assert category(frames) == expected


def test_only_request_threads_count() -> None:
    stacks = [
        (["thread (1): ThreadPoolExecutor-0_3", HANDLE, "write (gunicorn/util.py:348)"], 3),
        (["thread (4): ThreadPoolExecutor-0_0",
          "EventWorker.handle (functions/runtime/worker.py:325)",
          "ThreadWorker.handle (gunicorn/workers/gthread.py:513)",
          "Request.parse (gunicorn/http/message.py:541)",
          "DeadlineSocket.recv (functions/runtime/worker.py:160)"], 20),
        (["thread (5): ThreadPoolExecutor-0_1", HANDLE, SLOTS], 30),
        (["thread (6): ThreadPoolExecutor-0_2", HANDLE, SLOTS,
          "EventEndpoint.__call__ (functions/runtime/endpoint.py:117)"], 7),
        (["thread (2): informer-pods", "Informer._watch (functions/kube/cache.py:176)"], 50),
        (["thread (3): ThreadPoolExecutor-0_1", "_worker (concurrent/futures/thread.py:81)",
          "SimpleQueue.get (queue.py:1)"], 40),
    ]
    assert [count for _, count in request_stacks(stacks)] == [3, 7]


def test_summarise_and_report() -> None:
    stacks = [
        ([HANDLE, "HttpTransport.send (functions/kube/transport.py:114)",
          "SSLSocket.read (ssl.py:1167)"], 30),
        ([HANDLE, "Coalescer.run (functions/runtime/passes.py:104)",
          "Condition.wait (threading.py:331)"], 10),
        (["Informer._watch (functions/kube/cache.py:176)"], 100),
    ]
    found = summarise(stacks, rate=10.0)
    assert found["seconds"] == 4.0
    assert found["categories"] == {
        "API requests (mostly waiting for the answer)": {"seconds": 3.0, "share": 0.75},
        "waiting for the running pass of the same job": {"seconds": 1.0, "share": 0.25}}
    report = markdown({"ours": {"status": found}, "ours-knative": {}})
    assert "### status (ours): 4.0 s in deliveries" in report
    assert "| API requests (mostly waiting for the answer) | 3.0 | 75% |" in report
    assert markdown({"ours": None}) == []


def test_nothing_sampled_is_zero_seconds() -> None:
    assert summarise([], rate=100.0) == {"seconds": 0.0, "categories": {}}

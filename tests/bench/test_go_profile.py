"""The Go profiles' pure parts: reading ``go tool pprof -traces`` and putting samples in
categories (the profiles themselves are taken by ``make profile``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.go_profile import (
    ADAPTER_CATEGORIES,
    APISERVER_CATEGORIES,
    OTHER,
    categorise,
    parse_traces,
    process_environment,
    summarise,
)

TRACES = Path(__file__).parent.parent / "data" / "bench" / "apiserver.traces"
FINISH = "k8s.io/apiserver/pkg/endpoints/handlers/finisher.finishRequest.func1"
LIST = "k8s.io/apiserver/pkg/endpoints/handlers.ListResource.func1"


def test_parse_traces_reads_every_sample_with_its_frames_from_the_leaf() -> None:
    stacks = parse_traces(TRACES.read_text())
    assert [round(seconds, 3) for _, seconds in stacks] == [0.01, 0.02, 0.01, 0.01]
    frames, _ = stacks[0]
    assert frames[0].startswith("k8s.io/kube-openapi/pkg/validation/validate.")
    assert frames[-1] == FINISH
    found = summarise(stacks, APISERVER_CATEGORIES)
    assert found["seconds"] == 0.05
    assert next(iter(found["categories"])) == "Go garbage collection"
    assert found["categories"]["creates"] == {"seconds": 0.01, "share": 0.2}


@pytest.mark.parametrize(("frames", "category"), [
    pytest.param(["encoding/json.Marshal",
                  "k8s.io/apiserver/pkg/endpoints/handlers.(*WatchServer).HandleHTTP",
                  "k8s.io/apiserver/pkg/endpoints/handlers.serveWatch", LIST],
                 "watches (encode, send)", id="a-watch-is-served-by-list"),
    pytest.param(["sigs.k8s.io/json.Unmarshal", LIST], "lists", id="a-list"),
    pytest.param(["runtime.mallocgc",
                  "k8s.io/apiextensions-apiserver/pkg/apiserver.(*crdHandler).serveStatus."
                  "UpdateResource.func2.4", FINISH], "updates", id="an-inlined-update"),
    pytest.param(["runtime.gcAssistAlloc", "runtime.mallocgc",
                  "k8s.io/apiserver/pkg/endpoints/handlers.(*patcher).patchResource.func2"],
                 "Go garbage collection", id="an-allocation-assist-is-gc"),
    pytest.param(["crypto/tls.(*Conn).Write", "golang.org/x/net/http2.(*serverConn).writeFrame"],
                 "connections (TLS, HTTP/2)", id="connections"),
    pytest.param(["runtime.futex", "main.main"], OTHER, id="other"),
])
def test_categorise_apiserver(frames: list[str], category: str) -> None:
    assert categorise(frames, APISERVER_CATEGORIES) == category


@pytest.mark.parametrize(("frames", "category"), [
    pytest.param(["encoding/json.Marshal",
                  "github.com/cloudevents/sdk-go/v2/event.(*Event).SetData",
                  "knative.dev/eventing/pkg/adapter/apiserver/events.makeEvent"],
                 "making the CloudEvent (JSON of the object)", id="make"),
    pytest.param(["syscall.write", "net/http.(*persistConn).writeLoop"],
                 "sending the CloudEvent (HTTP)", id="send"),
    pytest.param(["sigs.k8s.io/json.Unmarshal",
                  "k8s.io/apimachinery/pkg/watch.(*StreamWatcher).receive"],
                 "the watch (TLS read, JSON decode)", id="watch"),
    pytest.param(["runtime.schedule", "runtime.mcall"], "Go scheduler", id="scheduler"),
])
def test_categorise_adapter(frames: list[str], category: str) -> None:
    assert categorise(frames, ADAPTER_CATEGORIES) == category


def test_process_environment_of_this_process() -> None:
    assert process_environment(os.getpid()).get("PATH") == os.environ.get("PATH")
    assert process_environment(2 ** 22 + 1) == {}

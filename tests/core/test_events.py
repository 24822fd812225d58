"""Parsing of ApiServerSource and PingSource CloudEvents: every public sample, and bad input."""

from __future__ import annotations

import json
from typing import Any

import pytest

from functions.core.errors import InvalidEventError
from functions.core.events import ApiEvent, ObjectRef, parse_event
from functions.core.keys import ObjectKey
from tests.support import CLOUDEVENTS

SAMPLES = CLOUDEVENTS
TRANSPORT_HEADERS = {"Host", "Content-Length", "Accept-Encoding"}


def load_sample(name: str) -> tuple[dict[str, str], bytes]:
    """Headers and body of a sample, serialised as the adapter sent it."""
    data = json.loads((SAMPLES / name).read_text())
    if "headers" in data:
        headers = {k: v for k, v in data["headers"].items() if k not in TRANSPORT_HEADERS}
        return headers, json.dumps(data["body"], separators=(",", ":")).encode()
    return {"Content-Type": "application/cloudevents+json"}, json.dumps(data).encode()


@pytest.mark.parametrize(("sample", "operation", "mode", "ref", "with_object", "extensions"), [
    pytest.param("01-captured-resource-add-clusterscoped-trainer.http.json", "add", "resource",
                 ("trainer.example.com/v1alpha1", "Trainer", "", "default"), True,
                 {"namespace": "", "kind": "Trainer"}, id="cluster-scoped-add"),
    pytest.param("02-captured-resource-update-pytorchjob-status.http.json", "update",
                 "resource", ("kubeflow.org/v1", "PyTorchJob", "team-a", "mnist"), True,
                 {"apiversion": "kubeflow.org/v1"}, id="namespaced-update"),
    pytest.param("03-captured-resource-delete-pytorchjob.http.json", "delete", "resource",
                 ("kubeflow.org/v1", "PyTorchJob", "team-a", "mnist"), True,
                 {"name": "mnist"}, id="delete"),
    pytest.param("04-captured-ref-add-pytorchjob-with-ceoverrides.http.json", "add",
                 "reference", ("kubeflow.org/v1", "PyTorchJob", "team-a", "mnist"), False,
                 {"controller": "trainer"}, id="reference-mode-ceoverrides"),
    pytest.param("05-openshift-kubevirt-vm-resource-add-via-broker.structured.json", "add",
                 "resource", ("kubevirt.io/v1", "VirtualMachine", "kubevirt-eventing",
                              "rhel-vm-2"), True,
                 {"knativearrivaltime": "2025-07-07T20:26:14.164039673Z"},
                 id="structured-via-broker"),
    pytest.param("06-core-event-resource-update.structured.json", "update", "resource",
                 ("v1", "Event", "default",
                  "rguske-tkc-eventing-np-2-fpbf2-d77586c79-s7k26.1782a4939981938f"), True,
                 {"kind": "Event"}, id="core-kind-without-apiversion-extension"),
])
def test_every_sample_parses(sample: str, operation: str, mode: str,
                             ref: tuple[str, str, str, str], with_object: bool,
                             extensions: dict[str, str]) -> None:
    headers, body = load_sample(sample)
    event = parse_event(headers, body)
    assert event.operation == operation
    assert event.mode == mode
    assert event.ref == ObjectRef(api_version=ref[0], kind=ref[1], namespace=ref[2],
                                  name=ref[3])
    assert event.ref.key() == ObjectKey(*ref)
    assert extensions.items() <= event.extensions.items()
    raw = json.loads((SAMPLES / sample).read_text())
    expected_id = raw["headers"]["Ce-Id"] if "headers" in raw else raw["id"]
    assert event.id == expected_id
    if with_object:
        assert event.object == (raw["body"] if "headers" in raw else raw["data"])
    else:
        assert event.object is None


def test_parsed_event_is_immutable() -> None:
    event = parse_event(*load_sample("02-captured-resource-update-pytorchjob-status.http.json"))
    with pytest.raises(ValueError, match="frozen"):
        event.operation = "delete"
    assert isinstance(event, ApiEvent)


def test_ping_event_is_a_resync() -> None:
    headers = {"Ce-Specversion": "1.0", "Ce-Type": "dev.knative.sources.ping",
               "Ce-Source": "/apis/v1/namespaces/opendatahub/pingsources/resync",
               "Ce-Id": "tick-1", "Content-Type": "application/json"}
    event = parse_event(headers, b'{"reason": "periodic resync"}')
    assert (event.operation, event.mode, event.ref, event.object) == ("resync", "ping", None,
                                                                      None)
    assert parse_event({**headers, "Content-Type": "text/plain"}, b"tick").operation == "resync"
    assert parse_event({k: v for k, v in headers.items() if k != "Content-Type"},
                       b"").operation == "resync"


BINARY = {"Ce-Specversion": "1.0", "Ce-Type": "dev.knative.apiserver.resource.update",
          "Ce-Source": "https://10.96.0.1:443", "Ce-Id": "e1", "Ce-Kind": "Pod",
          "Ce-Name": "p", "Ce-Namespace": "ns", "Ce-Apiversion": "v1",
          "Content-Type": "application/json"}
POD = b'{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns"}}'


def without(name: str) -> dict[str, str]:
    return {k: v for k, v in BINARY.items() if k != name}


@pytest.mark.parametrize(("headers", "body", "status", "reason"), [
    pytest.param(BINARY, POD[:40], 400, "truncated", id="truncated-json"),
    pytest.param(BINARY, b'{"kind": Pod}', 400, "not valid JSON", id="invalid-json"),
    pytest.param({**BINARY, "Content-Type": "text/plain"}, POD, 415, "not JSON",
                 id="wrong-content-type-binary"),
    pytest.param({"Content-Type": "text/plain"}, POD, 415, "neither JSON",
                 id="wrong-content-type-no-ce-headers"),
    pytest.param({"Content-Type": "application/json"}, POD, 400, "not a CloudEvent",
                 id="plain-json-no-ce-headers"),
    pytest.param(without("Ce-Type"), POD, 400, "ce-type", id="missing-ce-type"),
    pytest.param(without("Ce-Source"), POD, 400, "ce-source", id="missing-ce-source"),
    pytest.param(without("Ce-Id"), POD, 400, "ce-id", id="missing-ce-id"),
    pytest.param(without("Ce-Specversion"), POD, 400, "ce-specversion",
                 id="missing-ce-specversion"),
    pytest.param({**BINARY, "Ce-Specversion": "0.2"}, POD, 400, "specversion '0.2'",
                 id="unknown-specversion"),
    pytest.param(BINARY, b"[1, 2]", 400, "must be a JSON object, got an array",
                 id="data-is-array"),
    pytest.param(BINARY, b'"text"', 400, "got a string", id="data-is-string"),
    pytest.param(BINARY, b"", 400, "no data", id="no-data"),
    pytest.param(BINARY, b'{"kind": "Pod", "x": "\xff"}', 400, "not valid UTF-8",
                 id="non-utf8-binary"),
    pytest.param({"Content-Type": "application/cloudevents+json"}, b'{"id": "\xfe"}', 400,
                 "not valid UTF-8", id="non-utf8-structured"),
    pytest.param({"Content-Type": "application/cloudevents+json"}, b'{"specversion": "1.0"',
                 400, "truncated", id="structured-truncated"),
    pytest.param({"Content-Type": "application/cloudevents+json"}, b"[]", 400,
                 "must be a JSON object", id="structured-not-object"),
    pytest.param({"Content-Type": "application/cloudevents+json"},
                 b'{"specversion": "1.0", "type": "dev.knative.apiserver.resource.add", '
                 b'"source": "s", "data": {}}', 400, "'id'", id="structured-missing-id"),
    pytest.param({"Content-Type": "application/cloudevents+json"},
                 b'{"specversion": "1.0", "id": "1", "source": "s", '
                 b'"type": "dev.knative.apiserver.resource.add", "data": [1]}', 400,
                 "got an array", id="structured-data-not-object"),
    pytest.param({"Content-Type": "application/cloudevents-batch+json"}, b"[]", 415, "batch",
                 id="batch-mode"),
    pytest.param({**BINARY, "Ce-Type": "com.example.other"}, POD, 422,
                 "unsupported event type", id="foreign-type"),
    pytest.param({**BINARY, "Ce-Type": "dev.knative.apiserver.resource.patch"}, POD, 422,
                 "unsupported operation", id="unknown-operation"),
    pytest.param({k: v for k, v in BINARY.items() if k not in ("Ce-Kind", "Ce-Name")},
                 b'{"metadata": {}}', 422, "kind, name", id="object-without-identity"),
    pytest.param({**BINARY, "Ce-Bad_ext": "x"}, POD, 400, "lowercase", id="bad-extension-name"),
    pytest.param(BINARY, b"\x00\x00\x00\x7b\x00\x00\x00\x7d\xff\xff\xff\xff", 400,
                 "not valid UTF-8", id="read-as-utf32-by-a-guess"),
    pytest.param(BINARY, b"\x00\x00\x00{}", 400, "not valid JSON", id="nul-bytes-before-json"),
    pytest.param(BINARY, b'{"kind":"Pod","metadata":[1]}', 422, "metadata must be a JSON object",
                 id="metadata-is-a-list"),
    pytest.param({**BINARY, "Ce-Name": "7\u00e9x"}, b'{"kind":"Pod"}', 422,
                 "not a Kubernetes object name", id="name-not-ascii"),
    pytest.param(BINARY, b'{"kind":"Pod","metadata":{"name":"Upper"}}', 422,
                 "not a Kubernetes object name", id="name-upper-case"),
    pytest.param(BINARY, b'{"kind":"Pod","metadata":{"name":"' + b"a" * 64 + b'"}}', 422,
                 "not a Kubernetes object name", id="name-label-over-63"),
    pytest.param(BINARY, b'{"kind":"Pod","metadata":{"name":"p","namespace":"a.b"}}', 422,
                 "not a Kubernetes namespace name", id="namespace-with-a-dot"),
    pytest.param(BINARY, b"[" * 50_000, 400, "nested too deeply", id="binary-50000-deep"),
    pytest.param(BINARY, POD[:-1] + b',"x":' + b"[" * 50_000 + b"]" * 50_000 + b"}", 400,
                 "nested too deeply", id="binary-object-with-a-deep-field"),
    pytest.param({"Content-Type": "application/cloudevents+json"}, b"[" * 50_000, 400,
                 "nested too deeply", id="structured-50000-deep"),
    pytest.param({"Content-Type": "application/cloudevents+json"},
                 b'{"specversion":"1.0","id":"1","source":"s","data":' + b'{"a":' * 50_000,
                 400, "nested too deeply", id="structured-data-50000-deep"),
])
def test_bad_input_is_rejected_with_a_reason(headers: dict[str, str], body: bytes, status: int,
                                             reason: str) -> None:
    with pytest.raises(InvalidEventError) as caught:
        parse_event(headers, body)
    assert caught.value.status == status
    assert reason in caught.value.reason


def test_body_over_the_limit_is_413() -> None:
    with pytest.raises(InvalidEventError) as caught:
        parse_event(BINARY, POD, max_bytes=len(POD) - 1)
    assert caught.value.status == 413
    assert parse_event(BINARY, POD, max_bytes=len(POD)).ref is not None


@pytest.mark.parametrize(("data", "headers", "expected"), [
    pytest.param({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}},
                 {"Ce-Namespace": ""}, ("v1", "Namespace", "", "n"), id="empty-namespace"),
    pytest.param({"metadata": {"name": "from-data"}}, {}, ("v1", "Pod", "ns", "from-data"),
                 id="extensions-fill-gaps"),
])
def test_reference_fields(data: dict[str, Any], headers: dict[str, str],
                          expected: tuple[str, str, str, str]) -> None:
    event = parse_event({**BINARY, **headers}, json.dumps(data).encode())
    assert event.ref is not None
    assert event.ref.key() == ObjectKey(*expected)


def test_percent_encoded_header_values_are_decoded() -> None:
    event = parse_event({**BINARY, "Ce-Controller": "odh%20training"}, POD)
    assert event.extensions["controller"] == "odh training"


@pytest.mark.parametrize("sample", [
    pytest.param("01-captured-resource-add-clusterscoped-trainer.http.json", id="trainer-add"),
    pytest.param("02-captured-resource-update-pytorchjob-status.http.json", id="job-update"),
    pytest.param("03-captured-resource-delete-pytorchjob.http.json", id="job-delete"),
    pytest.param("04-captured-ref-add-pytorchjob-with-ceoverrides.http.json", id="ref-add"),
])
def test_binary_and_structured_modes_read_the_same_event(sample: str) -> None:
    """Binary mode is read without the SDK (every delivery passes there); the same event in
    structured mode goes through the SDK, and both must agree field by field."""
    headers, body = load_sample(sample)
    envelope: dict[str, Any] = {name[3:].lower(): value for name, value in headers.items()
                                if name.lower().startswith("ce-")}
    envelope["datacontenttype"] = headers["Content-Type"]
    envelope["data"] = json.loads(body)
    structured = parse_event({"Content-Type": "application/cloudevents+json"},
                             json.dumps(envelope).encode())
    assert parse_event(headers, body).model_dump() == structured.model_dump()


@pytest.mark.parametrize(("header", "value", "reason"), [
    pytest.param("Ce-Time", "yesterday", "'time'", id="time-not-iso"),
    pytest.param("Ce-Time", "2026-11-29T23:47:20", "timezone aware", id="time-without-zone"),
    pytest.param("Ce-Subject", "", "'subject' must not be empty", id="empty-subject"),
    pytest.param("Ce-Data", "x", "'data' is reserved", id="data-extension"),
    pytest.param("Ce-Id", "%20", None, id="percent-decoded-id"),
])
def test_binary_attribute_rules(header: str, value: str, reason: str | None) -> None:
    headers = {**BINARY, header: value}
    if reason is None:
        assert parse_event(headers, POD).id == " "
        return
    with pytest.raises(InvalidEventError) as caught:
        parse_event(headers, POD)
    assert caught.value.status == 400
    assert reason in caught.value.reason

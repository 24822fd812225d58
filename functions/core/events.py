"""What an incoming CloudEvent means to a controller: an operation on one object, or "resync".

The functions are fed by a Knative ApiServerSource (watch events as CloudEvents) and a
PingSource (a periodic tick). This module turns one HTTP request into an immutable, typed
:class:`ApiEvent` and rejects everything else with an :class:`InvalidEventError` whose reason
names exactly what is wrong, so the HTTP layer can answer 4xx and the sender never retries it.

It parses with the ``cloudevents`` 2.x ``core`` API only (binary and structured content mode).
The SDK is lenient where a controller must not be: it invents an ``id`` when one is missing,
falls back to specversion 1.0, and hands back undecodable JSON as a string. The strict event
factory and the data checks below close those gaps. Parsing is pure: no I/O, no clock.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final, Literal
from urllib.parse import unquote

import orjson
from cloudevents.core.base import BaseCloudEvent
from cloudevents.core.bindings.http import HTTPMessage, from_structured
from cloudevents.core.exceptions import BaseCloudEventException
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent
from pydantic import BaseModel, ConfigDict

from functions.core.errors import InvalidEventError
from functions.core.keys import ObjectKey

RESOURCE_TYPE_PREFIX: Final = "dev.knative.apiserver.resource."
REFERENCE_TYPE_PREFIX: Final = "dev.knative.apiserver.ref."
PING_TYPE: Final = "dev.knative.sources.ping"
STRUCTURED_MEDIA_TYPE: Final = "application/cloudevents+json"
BATCH_MEDIA_TYPE: Final = "application/cloudevents-batch+json"
SUPPORTED_SPECVERSION: Final = "1.0"
# A Kubernetes object is at most ~1.5 MiB (the etcd request limit); leave room for the envelope.
MAX_BODY_BYTES: Final = 3 * 1024 * 1024

REQUIRED_ATTRIBUTES: Final = ("specversion", "id", "source", "type")
_CONTEXT_ATTRIBUTES: Final = frozenset(
    {"specversion", "id", "source", "type", "datacontenttype", "dataschema", "subject", "time"})

Operation = Literal["add", "update", "delete", "resync"]
Mode = Literal["resource", "reference", "ping"]
_OPERATIONS: Final[dict[str, Operation]] = {"add": "add", "update": "update", "delete": "delete"}

_FORMAT: Final = JSONFormat()


class ObjectRef(BaseModel):
    """The object an event is about; ``namespace`` is ``""`` for cluster-scoped objects."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    api_version: str
    kind: str
    namespace: str = ""
    name: str

    def key(self) -> ObjectKey:
        return ObjectKey(self.api_version, self.kind, self.namespace, self.name)


class ApiEvent(BaseModel):
    """One parsed event. ``object`` is the full object in Resource mode, else ``None``.

    ``ref`` is ``None`` only for resync ticks. The model is frozen; treat ``object`` as
    read-only too (handlers re-read current state from the API server anyway).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    source: str
    type: str
    operation: Operation
    mode: Mode
    ref: ObjectRef | None = None
    object: dict[str, Any] | None = None
    subject: str | None = None
    time: datetime | None = None
    extensions: dict[str, str] = {}


def parse_event(headers: Mapping[str, str], body: bytes, *,
                max_bytes: int = MAX_BODY_BYTES) -> ApiEvent:
    """Parse one HTTP request (either content mode) into an :class:`ApiEvent`.

    :raises InvalidEventError: with status 413 (too large), 415 (content type) or 400/422
        (malformed, or a well-formed CloudEvent this package does not handle).
    """
    try:
        return _parse_event(headers, body, max_bytes)
    except RecursionError as exc:
        # JSON nested deeper than the interpreter's recursion limit (thousands of "[" within
        # the body limit): malformed input, answered 4xx so that it is never retried.
        raise InvalidEventError("body is not acceptable JSON: nested too deeply") from exc


def _parse_event(headers: Mapping[str, str], body: bytes, max_bytes: int) -> ApiEvent:
    if len(body) > max_bytes:
        raise InvalidEventError(f"body of {len(body)} bytes exceeds the limit of {max_bytes}", 413)
    lowered = {name.lower(): value for name, value in headers.items()}
    content_type = lowered.get("content-type", "")
    media_type = content_type.partition(";")[0].strip().lower()
    if any(name.startswith("ce-") for name in lowered):
        attributes, data = _parse_binary(lowered, body, media_type)
        return _to_api_event(attributes, data, body)
    if media_type == STRUCTURED_MEDIA_TYPE:
        event = _parse_structured(lowered, body)
    elif media_type == BATCH_MEDIA_TYPE:
        raise InvalidEventError("batched CloudEvents are not supported; send one event", 415)
    elif media_type and not _is_json(media_type):
        raise InvalidEventError(
            f"Content-Type {content_type!r} is neither JSON (binary mode, with Ce-* headers) "
            f"nor {STRUCTURED_MEDIA_TYPE} (structured mode)", 415)
    else:
        raise InvalidEventError(
            "not a CloudEvent: no Ce-* headers (binary mode) and Content-Type is not "
            f"{STRUCTURED_MEDIA_TYPE} (structured mode); missing ce-type, ce-source, ce-id, "
            "ce-specversion")
    return _to_api_event(event.get_attributes(), event.get_data(), None)


def _is_json(media_type: str) -> bool:
    return JSONFormat.JSON_CONTENT_TYPE_PATTERN.match(media_type) is not None


def _strict_factory(attributes: dict[str, Any],
                    data: dict[str, Any] | str | bytes | None) -> BaseCloudEvent:
    """Build a v1.0 event, refusing what the SDK would silently fill in."""
    for name in REQUIRED_ATTRIBUTES:
        if name not in attributes:
            raise InvalidEventError(f"missing required attribute {name!r} (header ce-{name})")
        value = attributes[name]
        if not isinstance(value, str) or not value:
            raise InvalidEventError(f"attribute {name!r} must be a non-empty string")
    if attributes["specversion"] != SUPPORTED_SPECVERSION:
        raise InvalidEventError(f"unsupported specversion {attributes['specversion']!r}; "
                                f"only {SUPPORTED_SPECVERSION!r} is understood")
    return CloudEvent(attributes, data)


def _parse_binary(headers: dict[str, str], body: bytes,
                  media_type: str) -> tuple[dict[str, Any], Any]:
    """Attributes and data of a binary-mode event, checked as the CloudEvents SDK's binding
    and v1.0 event do (percent-decoded headers, ISO 8601 ``time``, attribute and extension
    rules), without building an SDK event: every delivery passes here."""
    for name in REQUIRED_ATTRIBUTES:
        if not headers.get(f"ce-{name}"):
            raise InvalidEventError(f"missing required header ce-{name}")
    event_type = headers["ce-type"]
    if event_type != PING_TYPE and body and media_type and not _is_json(media_type):
        raise InvalidEventError(
            f"Content-Type {headers.get('content-type')!r} is not JSON; an ApiServerSource "
            "event carries application/json data", 415)
    _require_utf8(body)
    attributes: dict[str, Any] = {name[3:]: unquote(value) for name, value in headers.items()
                                  if name.startswith("ce-")}
    if "content-type" in headers:
        attributes["datacontenttype"] = headers["content-type"]
    _check_attributes(attributes)
    data: Any = None
    if body:
        data = body.decode("utf-8")
        if _is_json((attributes.get("datacontenttype") or "application/json")
                    .partition(";")[0].strip().lower()):
            with contextlib.suppress(orjson.JSONDecodeError):  # else _object_data says why
                data = orjson.loads(body)
    return attributes, data


_EXTENSION_NAME = re.compile(r"^[a-z0-9]+$")


def _check_attributes(attributes: dict[str, Any]) -> None:
    """The v1.0 attribute rules (the SDK's, with its wording for the reasons)."""
    for name in REQUIRED_ATTRIBUTES:
        if not attributes.get(name):
            raise InvalidEventError(f"attribute {name!r} must be a non-empty string")
    if attributes["specversion"] != SUPPORTED_SPECVERSION:
        raise InvalidEventError(f"unsupported specversion {attributes['specversion']!r}; "
                                f"only {SUPPORTED_SPECVERSION!r} is understood")
    for name in ("subject", "datacontenttype", "dataschema"):
        if name in attributes and not attributes[name]:
            raise InvalidEventError(f"invalid CloudEvent: attribute {name!r} must not be empty")
    if "time" in attributes:
        try:
            moment = datetime.fromisoformat(attributes["time"])
        except ValueError as exc:
            raise InvalidEventError(f"invalid CloudEvent: attribute 'time': {exc}") from exc
        if moment.tzinfo is None:
            raise InvalidEventError("invalid CloudEvent: attribute 'time' must be timezone aware")
        attributes["time"] = moment
    for name in attributes.keys() - _CONTEXT_ATTRIBUTES:
        if name == "data" or not _EXTENSION_NAME.match(name):
            raise InvalidEventError(
                f"invalid CloudEvent: extension attribute {name!r} should only contain "
                "lowercase letters and numbers (and 'data' is reserved)")


def _parse_structured(headers: dict[str, str], body: bytes) -> BaseCloudEvent:
    _require_utf8(body)
    try:
        return from_structured(HTTPMessage(headers=headers, body=body), _FORMAT, _strict_factory)
    except InvalidEventError:
        raise
    except json.JSONDecodeError as exc:
        raise InvalidEventError(f"body is not valid JSON ({_json_problem(exc, body)})") from exc
    except AttributeError as exc:
        raise InvalidEventError("a structured-mode CloudEvent must be a JSON object") from exc
    except (BaseCloudEventException, ValueError, TypeError) as exc:
        raise InvalidEventError(f"invalid CloudEvent: {exc}") from exc


def _require_utf8(body: bytes) -> None:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidEventError(
            f"body is not valid UTF-8 (byte 0x{body[exc.start]:02x} at offset {exc.start})"
        ) from exc


def _json_problem(exc: json.JSONDecodeError, body: bytes) -> str:
    ends_early = exc.pos >= len(body.rstrip()) or exc.msg.startswith("Unterminated string")
    where = "the document is truncated" if ends_early else f"at offset {exc.pos}"
    return f"{exc.msg}: {where}"


def _to_api_event(attributes: Mapping[str, Any], data: Any,
                  binary_body: bytes | None) -> ApiEvent:
    """``binary_body`` is the raw data in binary mode, where undecodable JSON arrives as
    text (its parse error is then reported)."""
    event_type = str(attributes["type"])
    extensions = {name: _text(value) for name, value in attributes.items()
                  if name not in _CONTEXT_ATTRIBUTES}
    common: dict[str, Any] = {
        "id": attributes["id"], "source": attributes["source"], "type": event_type,
        "subject": attributes.get("subject"), "time": attributes.get("time"),
        "extensions": extensions,
    }
    if event_type == PING_TYPE:
        return ApiEvent.model_construct(operation="resync", mode="ping", ref=None,
                                        object=None, **common)
    if event_type.startswith(RESOURCE_TYPE_PREFIX):
        mode: Mode = "resource"
        verb = event_type.removeprefix(RESOURCE_TYPE_PREFIX)
    elif event_type.startswith(REFERENCE_TYPE_PREFIX):
        mode = "reference"
        verb = event_type.removeprefix(REFERENCE_TYPE_PREFIX)
    else:
        raise InvalidEventError(
            f"unsupported event type {event_type!r}; expected {RESOURCE_TYPE_PREFIX}*, "
            f"{REFERENCE_TYPE_PREFIX}* or {PING_TYPE}", 422)
    operation = _OPERATIONS.get(verb)
    if operation is None:
        raise InvalidEventError(f"unsupported operation {verb!r} in event type {event_type!r}",
                                422)
    datacontenttype = attributes.get("datacontenttype")
    if datacontenttype and not _is_json(str(datacontenttype).partition(";")[0].strip().lower()):
        raise InvalidEventError(f"datacontenttype {datacontenttype!r} is not JSON", 415)
    data = _object_data(data, binary_body)
    ref = _resource_ref(data, extensions) if mode == "resource" else _reference_ref(data,
                                                                                     extensions)
    # Every field is checked above, and the object is only read: skip re-validating (and
    # copying) a whole Kubernetes object on every delivery.
    return ApiEvent.model_construct(operation=operation, mode=mode, ref=ref,
                                    object=data if mode == "resource" else None, **common)


def _text(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _object_data(data: dict[str, Any] | str | bytes | None,
                 binary_body: bytes | None) -> dict[str, Any]:
    if data is None:
        raise InvalidEventError("event has no data; expected the object or its reference")
    if isinstance(data, bytes):
        raise InvalidEventError("data is binary; expected a JSON object")
    parsed: Any = data
    if isinstance(data, str) and binary_body is not None:
        # JSON exchanged between systems is UTF-8 (RFC 8259 8.1): decoded as such, never by
        # json's guess from the first bytes (a body opening with NULs read as UTF-32 failed
        # with a UnicodeDecodeError instead of a refusal).
        _require_utf8(binary_body)
        try:
            parsed = json.loads(binary_body.decode("utf-8"))
        except json.JSONDecodeError as exc:
            raise InvalidEventError(
                f"data is not valid JSON ({_json_problem(exc, binary_body)})") from exc
    if not isinstance(parsed, dict):
        raise InvalidEventError(f"data must be a JSON object, got {_json_kind(parsed)}")
    return parsed


def _json_kind(value: Any) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", int: "a number",
             float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _resource_ref(obj: dict[str, Any], extensions: Mapping[str, str]) -> ObjectRef:
    meta = obj.get("metadata")
    if meta is None:
        meta = {}
    elif not isinstance(meta, dict):
        raise InvalidEventError(f"object metadata must be a JSON object, got {_json_kind(meta)}",
                                422)
    return _ref(obj.get("apiVersion"), obj.get("kind"), meta.get("namespace"),
                meta.get("name"), extensions)


def _reference_ref(data: dict[str, Any], extensions: Mapping[str, str]) -> ObjectRef:
    return _ref(data.get("apiVersion"), data.get("kind"), data.get("namespace"),
                data.get("name"), extensions)


def _ref(api_version: Any, kind: Any, namespace: Any, name: Any,
         extensions: Mapping[str, str]) -> ObjectRef:
    """Fields from ``data`` win; the ``apiversion``/``kind``/``namespace``/``name`` extensions
    fill gaps (older adapters lack ``apiversion``; cluster-scoped objects omit ``namespace``)."""
    fields = {
        "api_version": api_version or extensions.get("apiversion"),
        "kind": kind or extensions.get("kind"),
        "namespace": namespace or extensions.get("namespace") or "",
        "name": name or extensions.get("name"),
    }
    missing = [field for field, value in fields.items() if not value and field != "namespace"]
    if missing:
        raise InvalidEventError(f"event does not name its object: no {', '.join(missing)} in "
                                "data or extensions", 422)
    strings = {field: value for field, value in fields.items() if isinstance(value, str)}
    wrong = sorted(fields.keys() - strings.keys())
    if wrong:
        raise InvalidEventError(f"object {', '.join(wrong)} must be strings", 422)
    if not _NAME.fullmatch(strings["name"]):
        raise InvalidEventError(f"object name {strings['name'][:80]!r} is not a Kubernetes "
                                "object name (a DNS-1123 subdomain of at most 253 characters)",
                                422)
    if strings["namespace"] and not _NAMESPACE.fullmatch(strings["namespace"]):
        raise InvalidEventError(f"object namespace {strings['namespace'][:80]!r} is not a "
                                "Kubernetes namespace name (a DNS-1123 label)", 422)
    return ObjectRef(**strings)


# What the API server lets an object of the watched kinds be named (every one of them takes a
# DNS-1123 subdomain) and a namespace (a DNS-1123 label): an event naming anything else was
# not sent by a source, and a pass on it could only fail.
_LABEL = "[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
_NAME: Final = re.compile(rf"(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*", re.ASCII)
_NAMESPACE: Final = re.compile(_LABEL, re.ASCII)

"""The Broker's dead-letter sink: every event the functions still refused after the Broker's
retries becomes one JSON line on stdout, which the container log (``kubectl logs``, the
cluster's log store) keeps.

It is served like the functions (``python -m functions serve dead-letters``: gunicorn and a
Flask app), so it has their defences: a body limit (``DEAD_LETTER_MAX_BYTES``, default the
functions' 3 MiB, answered 413 above it without reading the rest), problem documents for every
refusal, health probes. A dead letter may be anything the functions refused, malformed input
included, so everything within the limit is accepted (202); a body that is refused or cannot be
read still leaves a line with what its headers say.

A line is bounded, whatever the event: its context attributes (``Ce-*`` headers in binary
mode, top-level members of a structured-mode body) and the Broker's ``knativeerror*``
extensions (why the last delivery failed), each value cut to a fixed length; the body's size and
SHA-256; and an excerpt of the event's data of ``DEAD_LETTER_EXCERPT_BYTES`` (default 2 KiB).
Whole bodies, which may be whole Kubernetes objects, and other headers (credentials among
them) never reach the log.

Only the Broker's dead letters are taken, as the functions take only its deliveries
(:mod:`functions.runtime.delivery_auth`): with ``authentication-oidc`` on, the Broker's filter
forwards a dead letter with the ServiceAccount of the Trigger whose delivery failed, for the
audience that Trigger's status records for its dead-letter sink (``status.
deadLetterSinkAudience``, the Broker's ``spec.delivery.deadLetterSink.audience`` unless the
Trigger has a sink of its own). So the sink accepts a token for its own audience from the
ServiceAccount of a Trigger of its namespace whose dead letters come here; anything else is
refused (401/403) before its body is read, and leaves no line (a stranger could otherwise fill
the log), only a log message with the reason. ``GET /metrics`` counts the verdicts.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import IO, Any

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from functions.core.delivery_auth import Settings
from functions.kube.client import KubeClient, RequestHook
from functions.runtime.app import KubeFactory, problem, read_body
from functions.runtime.delivery_auth import DeliveryGate
from functions.runtime.metrics import Metrics

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 3 * 1024 * 1024
DEFAULT_EXCERPT_BYTES = 2048
VALUE_CHARS = 256  # per attribute value
MAX_ATTRIBUTES = 32
STRUCTURED = "application/cloudevents+json"
RECEIVER = "dead-letters"


def _cut(value: Any) -> str:
    try:
        text = value if isinstance(value, str) else json.dumps(value, default=str)
    except (ValueError, RecursionError):
        text = f"<{type(value).__name__}>"
    return text if len(text) <= VALUE_CHARS else text[:VALUE_CHARS] + "…"


def _bounded(attributes: Mapping[str, Any]) -> dict[str, str]:
    return {str(name)[:64]: _cut(value)
            for name, value in list(attributes.items())[:MAX_ATTRIBUTES]}


def _structured(body: bytes) -> tuple[dict[str, Any], bytes] | None:
    """(attributes, data as JSON bytes) of a structured-mode body, or ``None`` if unreadable."""
    try:
        envelope = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(envelope, dict):
        return None
    attributes = {k: v for k, v in envelope.items() if k not in ("data", "data_base64")}
    if "data_base64" in envelope:
        return attributes, str(envelope["data_base64"]).encode()
    try:
        return attributes, json.dumps(envelope.get("data"), separators=(",", ":")).encode()
    except (ValueError, RecursionError):
        return attributes, body


def describe(headers: Mapping[str, str], body: bytes | None, excerpt_bytes: int) -> dict[str, Any]:
    """The bounded record of one dead letter (``body`` is ``None`` when it was not read)."""
    lowered = {name.lower(): value for name, value in headers.items()}
    attributes: dict[str, Any] = {name[3:]: value for name, value in lowered.items()
                                  if name.startswith("ce-")}
    data = body
    content_type = lowered.get("content-type", "")
    if body is not None and not attributes and content_type.startswith(STRUCTURED):
        parsed = _structured(body)
        if parsed is not None:
            attributes, data = parsed
    errors = {name.removeprefix("knativeerror"): attributes.pop(name)
              for name in list(attributes) if name.startswith("knativeerror")}
    record: dict[str, Any] = {
        "deadLetter": True,
        "received": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "attributes": _bounded(attributes),
        "error": _bounded(errors),
        "contentType": _cut(content_type),
    }
    if body is not None:
        record["bytes"] = len(body)
        record["sha256"] = hashlib.sha256(body).hexdigest()
    if data is not None:
        record["excerpt"] = data[:excerpt_bytes].decode("utf-8", "replace")
        record["truncated"] = len(data) > excerpt_bytes
    return record


class DeadLetterLog:
    """Writes records as JSON lines, one write and flush each, from any thread."""

    def __init__(self, out: IO[str] | None = None) -> None:
        self._out = out
        self._lock = threading.Lock()

    def write(self, record: Mapping[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":"), ensure_ascii=False)
        with self._lock:
            out = self._out or sys.stdout
            out.write(line + "\n")
            out.flush()


def create_dead_letter_app(*, max_body_bytes: int | None = None,
                           excerpt_bytes: int | None = None,
                           out: IO[str] | None = None,
                           delivery_auth: Settings | None = None,
                           kube_factory: KubeFactory | None = None) -> Flask:
    """The WSGI app of the dead-letter sink. ``delivery_auth`` defaults to the environment's
    settings (on unless ``FUNCTIONS_DELIVERY_AUTH=none``); when they cannot work, this raises
    :class:`functions.core.delivery_auth.ConfigError`, and the sink does not start."""
    limit = max_body_bytes or int(os.environ.get("DEAD_LETTER_MAX_BYTES", DEFAULT_MAX_BYTES))
    excerpt = excerpt_bytes or int(os.environ.get("DEAD_LETTER_EXCERPT_BYTES",
                                                  DEFAULT_EXCERPT_BYTES))
    sink = DeadLetterLog(out)
    metrics = Metrics()
    clients: list[KubeClient] = []
    lock = threading.Lock()

    def kube() -> KubeClient:
        """The sink's API client (for its reviews), made on first use, after the fork."""
        with lock:
            if not clients:
                factory = kube_factory or _default_kube
                clients.append(factory(metrics.api_request))
            return clients[0]

    gate = DeliveryGate(RECEIVER, delivery_auth, kube,
                        lambda reason: metrics.delivery_checked(RECEIVER, reason))
    gate.auth()  # settings that cannot work stop the sink here, at its start
    app = Flask("functions.dead_letters")

    @app.post("/")
    def receive() -> Response:
        refused = gate.admit(request.headers.get("Authorization"))
        if refused is not None:
            status, answer_headers, answer_body = refused
            return Response(answer_body, status=status, headers=answer_headers)
        headers = dict(request.headers.items())
        try:
            body = read_body(limit)
        except Exception as exc:  # the server's reader: bad chunked framing, a client gone
            sink.write({**describe(headers, None, excerpt), "refused": "unreadable body"})
            return problem(400, f"the request body could not be read: {type(exc).__name__}")
        if body is None:
            sink.write({**describe(headers, None, excerpt),
                        "refused": f"body over {limit} bytes"})
            return problem(413, f"body exceeds the limit of {limit} bytes")
        sink.write(describe(headers, body, excerpt))
        return Response(status=202)

    @app.get("/health/liveness")
    @app.get("/health/readiness")
    def health() -> Response:
        return Response("ok\n", mimetype="text/plain")

    @app.get("/metrics")
    def metrics_text() -> Response:
        text, content_type = metrics.render()
        return Response(text, content_type=content_type)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        return problem(exc.code or 400, exc.description or exc.name)

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> Response:
        log.exception("unexpected error while serving %s %s", request.method, request.path)
        return problem(503, f"internal error: {type(exc).__name__}", retry_after=30)

    return app


def _default_kube(on_request: RequestHook) -> KubeClient:
    return KubeClient.from_config(on_request=on_request)

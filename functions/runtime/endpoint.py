"""``POST /``, the CloudEvent endpoint, served straight from WSGI in front of the Flask app.

Every delivery of every event crosses this path, and Flask's request context, routing and
response object cost about 0.2 ms of CPU per request: a fifth of what a function spends on an
event whose pass finds nothing to do. So the endpoint reads the WSGI environ itself and answers
with plain status, headers and bytes; everything else (probes, metrics, other methods and
paths, and any error the endpoint itself did not foresee) is the Flask app's.

Answers are those the module docstring of :mod:`functions.runtime.app` lists: 202 with an
empty body, a problem document for 4xx, 503/429 with ``Retry-After``; never a 500.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from functions.runtime.outcomes import Outcome

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"
READY_WAIT_SECONDS = 30.0

Answer = tuple[int, list[tuple[str, str]], bytes]
StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def problem_answer(status: int, detail: str, *, retry_after: float | None = None,
                   title: str | None = None) -> Answer:
    """An RFC 9457 problem document."""
    body = json.dumps({"type": "about:blank", "title": title or HTTPStatus(status).phrase,
                       "status": status, "detail": detail}).encode()
    headers = [("Content-Type", PROBLEM_JSON), ("Content-Length", str(len(body)))]
    if retry_after is not None:
        headers.append(("Retry-After", str(max(1, math.ceil(retry_after)))))
    if status == 413:
        headers.append(("Connection", "close"))
    return status, headers, body


ACCEPTED: Answer = (202, [("Content-Length", "0")], b"")


class Metrics(Protocol):
    def event(self, function: str, event_type: str, kind: str, outcome: str) -> None: ...


class Receiver(Protocol):
    """What the endpoint needs of a function's runtime (:class:`~functions.runtime.app.
    FunctionRuntime`)."""

    function: str
    max_body_bytes: int

    def wait_ready(self, timeout: float) -> str | None: ...

    def metrics(self) -> Metrics: ...

    def admit(self, authorization: str | None) -> Answer | None:
        """``None`` when the sender may deliver (its ``Authorization`` header checked), else
        the refusal (:mod:`functions.runtime.delivery_auth`)."""

    def receive(self, headers: dict[str, str], body: bytes) -> Answer: ...


def outcome_answer(outcome: Outcome) -> Answer:
    """The HTTP answer for a dispatch outcome."""
    if outcome.kind in ("ok", "ignored"):
        return ACCEPTED
    if outcome.kind == "invalid":
        return problem_answer(422, outcome.detail)
    status = 429 if outcome.kind == "busy" else 503
    return problem_answer(status, outcome.detail or "try again later",
                          retry_after=outcome.retry_after)


def event_headers(environ: Mapping[str, Any]) -> dict[str, str]:
    """The request headers a CloudEvent parser needs, from a WSGI environ."""
    headers = {name[5:].replace("_", "-").title(): str(value)
               for name, value in environ.items() if name.startswith("HTTP_")}
    if environ.get("CONTENT_TYPE"):
        headers["Content-Type"] = str(environ["CONTENT_TYPE"])
    return headers


def read_body(environ: Mapping[str, Any], limit: int) -> bytes | None:
    """The request body, or ``None`` when it is over ``limit`` (then left unread)."""
    try:
        length = int(environ.get("CONTENT_LENGTH") or -1)
    except ValueError:
        length = -1
    if length > limit:
        return None
    stream = environ["wsgi.input"]
    body: bytes = stream.read(length) if length >= 0 else stream.read(limit + 1)
    return None if len(body) > limit else body


class EventEndpoint:
    """WSGI middleware: ``POST /`` is handled here, the rest by ``fallback`` (Flask)."""

    def __init__(self, runtime: Receiver, fallback: WsgiApp) -> None:
        self.runtime = runtime
        self.fallback = fallback

    def __call__(self, environ: dict[str, Any],
                 start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") != "POST" or environ.get("PATH_INFO") not in ("", "/"):
            return self.fallback(environ, start_response)
        try:
            status, headers, body = self.answer(environ)
        except Exception:
            # What the Flask app would have answered for an unexpected error (never a 500).
            log.exception("unexpected error while serving POST /")
            status, headers, body = problem_answer(503, "internal error", retry_after=30)
        start_response(f"{status} {HTTPStatus(status).phrase}", headers)
        return [body]

    def answer(self, environ: Mapping[str, Any]) -> Answer:
        runtime = self.runtime
        # Who sends is decided first: a refused sender's body is never read.
        refused = runtime.admit(environ.get("HTTP_AUTHORIZATION"))
        if refused is not None:
            return refused
        not_ready = runtime.wait_ready(READY_WAIT_SECONDS)
        if not_ready is not None:
            return problem_answer(503, f"function {runtime.function} is not ready: {not_ready}",
                                  retry_after=5)
        try:
            body = read_body(environ, runtime.max_body_bytes)
        except Exception as exc:  # the server's reader: bad chunked framing, a client gone
            runtime.metrics().event(runtime.function, "", "", "invalid")
            log.info("unreadable request body: %s: %s", type(exc).__name__, exc)
            return problem_answer(400, "the request body could not be read: "
                                  f"{type(exc).__name__}")
        if body is None:
            runtime.metrics().event(runtime.function, "", "", "invalid")
            return problem_answer(413, f"body exceeds the limit of {runtime.max_body_bytes} "
                                  "bytes")
        return runtime.receive(event_headers(environ), body)

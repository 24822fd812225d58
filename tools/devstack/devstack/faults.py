"""API fault injection: a transport that sits between a KubeClient and the real one and makes
a share of the requests fail the way a busy or flaky API server does.

Faults, each drawn with the same probability out of :attr:`FaultPlan.kinds`:

* ``throttle`` — ``429 Too Many Requests`` with ``Retry-After: 0``;
* ``error`` / ``unavailable`` — ``500`` / ``503``;
* ``conflict`` — ``409 Conflict`` on a write (reads pass), as when another writer got there
  first;
* ``timeout`` — the request reaches the API server but the answer is lost after a delay (a
  write has then happened although the client saw it fail);
* ``reset`` — the connection drops before the request is sent.

The draw comes from ``random.Random(seed)`` under a lock, so a run's fault sequence is
repeatable for a given request order. Used by the chaos tests and available to benchmarks.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from functions.kube.transport import Request, Response, Transport, TransportError

# The environment variable that gives a served function a fault plan (devstack.faulty_serve).
PLAN_VARIABLE = "FUNCTIONS_API_FAULTS"
FAULT_KINDS = ("throttle", "error", "unavailable", "conflict", "timeout", "reset")
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True)
class FaultPlan:
    rate: float = 0.2
    kinds: tuple[str, ...] = FAULT_KINDS
    seed: int = 0
    timeout_delay: float = 0.05

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError("rate is a probability between 0 and 1")
        unknown = set(self.kinds) - set(FAULT_KINDS)
        if unknown or not self.kinds:
            raise ValueError(f"fault kinds are some of {FAULT_KINDS}, not {sorted(unknown)}")


def _status(code: int, reason: str, message: str,
            headers: dict[str, str] | None = None) -> Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
            "reason": reason, "message": message}
    return Response(code, {"Content-Type": "application/json", **(headers or {})},
                    json.dumps(body).encode())


def plan_from_text(text: str, salt: int = 0) -> FaultPlan:
    """A plan from ``rate=0.1,seed=3,kinds=throttle+conflict`` (the ``FUNCTIONS_API_FAULTS``
    setting of a function process); ``salt`` varies the seed per process."""
    fields: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if not sep or name not in ("rate", "seed", "kinds"):
            raise ValueError(f"fault plan: expected rate=, seed= or kinds=, got {part!r}")
        fields[name] = value
    return FaultPlan(rate=float(fields.get("rate", "0.2")),
                     kinds=tuple(fields["kinds"].split("+")) if "kinds" in fields
                     else FAULT_KINDS,
                     seed=int(fields.get("seed", "0")) + salt)


def _refusal(fault: str) -> Response:
    """The answer of a busy API server: ``throttle``, ``error`` or ``unavailable``."""
    if fault == "throttle":
        return _status(429, "TooManyRequests", "injected: slow down", {"Retry-After": "0"})
    if fault == "error":
        return _status(500, "InternalError", "injected: internal error")
    return _status(503, "ServiceUnavailable", "injected: unavailable")


@dataclass
class FaultInjectingTransport:
    """Wraps ``inner``; :attr:`injected` counts the faults by kind, :attr:`passed` the rest."""

    inner: Transport
    plan: FaultPlan = field(default_factory=FaultPlan)
    enabled: bool = True
    injected: Counter[str] = field(default_factory=Counter)
    passed: int = 0

    def __post_init__(self) -> None:
        self._random = random.Random(self.plan.seed)  # noqa: S311 - repeatable, not secret
        self._guard = threading.Lock()

    def _draw(self, request: Request) -> str | None:
        with self._guard:
            if not self.enabled or self._random.random() >= self.plan.rate:
                self.passed += 1
                return None
            kind = self._random.choice(self.plan.kinds)
            if kind == "conflict" and request.method not in WRITE_METHODS:
                kind = "unavailable"
            self.injected[kind] += 1
            return kind

    def send(self, request: Request, timeout: float) -> Response:
        fault = self._draw(request)
        if fault is None:
            return self.inner.send(request, timeout)
        if fault in ("throttle", "error", "unavailable"):
            return _refusal(fault)
        if fault == "conflict":
            return _status(409, "Conflict", "injected: the object has been modified; "
                           "please apply your changes to the latest version and try again")
        if fault == "timeout":
            self.inner.send(request, timeout)
            time.sleep(self.plan.timeout_delay)
            raise TransportError(f"{request.method} {request.path}: injected: read timed out")
        raise TransportError(f"{request.method} {request.path}: injected: connection reset")

    def stream(self, request: Request, timeout: float) -> tuple[int, Mapping[str, str], Any]:
        """Streamed requests (watches) draw a fault too: they fail to connect, or are
        answered 503/429, as a busy API server does."""
        inner = getattr(self.inner, "stream", None)
        if inner is None:
            raise TransportError("the wrapped transport cannot stream")
        fault = self._draw(request)
        if fault in ("reset", "timeout"):
            raise TransportError(f"{request.method} {request.path}: injected: connection reset")
        if fault is not None:
            response = _refusal(fault if fault != "conflict" else "unavailable")
            return response.status, response.headers, _Body(response.body)
        result: tuple[int, Mapping[str, str], Any] = inner(request, timeout)
        return result

    def refresh_credentials(self) -> None:
        self.inner.refresh_credentials()

    def faults(self) -> int:
        with self._guard:
            return sum(self.injected.values())


class _Body:
    """A fault's body, read the way a streamed response
    (:class:`~functions.kube.transport.Streamed`) is."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def read(self) -> bytes:
        return self._data

    def stream(self, amount: int) -> Iterator[bytes]:
        yield self._data

    def release_conn(self) -> None:
        pass

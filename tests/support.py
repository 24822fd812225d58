"""Polling for a result and reading a condition: what many test modules share."""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from functions.core.errors import TemporaryError
from functions.kube.client import KubeClient
from functions.kube.resources import Resource

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[1]
# The public ApiServerSource CloudEvent samples (see its README).
CLOUDEVENTS = REPO / "tests" / "data" / "cloudevents"


def wait_for(condition: Callable[[], T | None], timeout: float = 30.0, interval: float = 0.1,
             message: str = "condition") -> T:
    """Poll ``condition()`` until it returns a truthy value, which is returned."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    """The ``status.conditions`` entry of ``type_`` (empty when there is none)."""
    for item in ((obj or {}).get("status") or {}).get("conditions") or []:
        if item.get("type") == type_:
            return dict(item)
    return {}


def http_status(port: int, path: str, timeout: float = 2.0) -> int | None:
    """The status of ``GET http://127.0.0.1:<port><path>``, or ``None`` without an answer."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", path)
        return connection.getresponse().status
    except OSError:
        return None
    finally:
        connection.close()


def watched(kube: KubeClient, res: Resource, namespace: str | None,
            stop: threading.Event) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every ``(type, object)`` a watch of ``res`` sees until ``stop`` is set (the existing
    objects first, as ADDED), read in windows of two seconds, each resumed from the last
    version seen; a refused watch is tried again."""
    version = "0"
    while not stop.is_set():
        try:
            events = list(kube.watch(res, namespace, resource_version=version,
                                     timeout_seconds=2))
        except TemporaryError:
            continue
        for event in events:
            obj = event.get("object") or {}
            version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
            yield str(event.get("type")), obj

"""Kubernetes Events about the objects handlers work on (what ``kubectl describe`` shows).

Event names are derived from the involved object's uid, the reason and the message, so a
redelivered CloudEvent that leads to the same Event bumps its count instead of adding another.

Recording is best effort. A function process records in the background (``background=True``,
as client-go's event broadcaster does): a pass never waits for its Events, which are nearly
half of a job's API requests; when the queue is full, the Event is dropped. A process that
stops (Knative scaling a function in, a rollout) closes its recorder: what is queued then goes
out at once, for as long as the stop allows, and only the rest is lost.

In the background, Events are also the lowest-priority writes. A ``Normal`` Event waits while
the function has passes in flight (``busy``), for at most ``hold_seconds``: under a burst the
pods, services and statuses a job's progress depends on reach the API server first, and the
Events follow once the burst is over. A ``Warning`` says something is wrong and never waits.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from functions.core.errors import TemporaryError
from functions.kube import resources
from functions.kube.client import ApiError, KubeClient

log = logging.getLogger(__name__)

NORMAL = "Normal"
WARNING = "Warning"
# The longest a Normal Event waits for a busy function to be idle: long enough for a burst of
# a few hundred jobs to be done first, short enough for ``kubectl describe`` to catch up soon.
HOLD_SECONDS = 60.0

_Queued = tuple[float, dict[str, Any], str, str, str]  # queued at, object, type, reason, message


class EventRecorder:
    # One sender, as client-go's event broadcaster has: under a burst the Events trail the
    # writes a job's progress depends on instead of competing with them for the API server
    # (four senders made a 200-job burst's pods and services exist 4-6 s later on 2 cores).
    # A burst of 1,000 jobs queues about 7,000 Events.
    queue_size = 10_000
    senders = 1
    # How long the function must have had no pass in flight before held Events go out, and
    # how often the sender looks.
    quiet_seconds = 0.2
    poll_seconds = 0.05

    def __init__(self, kube: KubeClient, component: str, *, background: bool = False,
                 busy: Callable[[], bool] | None = None,
                 hold_seconds: float = HOLD_SECONDS) -> None:
        self.kube = kube
        self.component = component
        self.hold_seconds = hold_seconds
        self.background = background
        self._busy = busy
        self._quiet_since: float | None = None
        # Warnings overtake the Normal Events held before them; each kind in its order.
        self._ready = threading.Condition()
        self._warnings: deque[_Queued] = deque()
        self._normals: deque[_Queued] = deque()
        # Once closing: the monotonic time after which the senders stop with Events queued.
        self._closing: float | None = None
        self._senders: list[threading.Thread] = []
        if background:
            for index in range(self.senders):
                thread = threading.Thread(target=self._send_queued, daemon=True,
                                          name=f"event-recorder-{index}")
                thread.start()
                self._senders.append(thread)

    def record(self, obj: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        """Best effort: a failure to record is logged, never raised."""
        if not self.background:
            self._record(obj, event_type, reason, message)
            return
        with self._ready:
            if self._closing is not None:
                log.info("recorder closed; dropped %s on %s", reason,
                         (obj.get("metadata") or {}).get("name"))
                return
            if len(self._warnings) + len(self._normals) >= self.queue_size:
                log.warning("event queue full; dropped %s on %s", reason,
                            (obj.get("metadata") or {}).get("name"))
                return
            idle = not self._warnings and not self._normals
            queued = (time.monotonic(), obj, event_type, reason, message)
            (self._warnings if event_type == WARNING else self._normals).append(queued)
            # The sender waits without a timeout only while both queues are empty; with
            # Normal Events held it looks again every ``poll_seconds``. Waking it for each
            # Event a burst records cost a creating pass about a tenth of its time.
            if idle or event_type == WARNING:
                self._ready.notify()

    def close(self, flush_seconds: float = 0.0) -> int:
        """Stop the senders once what is queued has been sent (held Normal Events no longer
        wait) or ``flush_seconds`` have passed, whichever comes first; later Events are dropped.
        Returns how many queued Events were not sent."""
        deadline = time.monotonic() + flush_seconds
        with self._ready:
            self._closing = deadline
            self._ready.notify_all()
        for thread in self._senders:
            # a write still in flight at the deadline is left to finish on its own
            thread.join(max(0.0, deadline - time.monotonic()) + self.poll_seconds)
        with self._ready:
            lost = len(self._warnings) + len(self._normals)
            self._warnings.clear()
            self._normals.clear()
        if lost:
            log.warning("%d Events not sent: the function stopped first", lost)
        return lost

    def _send_queued(self) -> None:
        while True:
            with self._ready:
                while not self._warnings and not self._normals:
                    if self._closing is not None:
                        return
                    self._ready.wait()
                if self._closing is not None and time.monotonic() >= self._closing:
                    return
                if self._warnings:
                    item = self._warnings.popleft()
                elif self._closing is not None or self._may_send(
                        self._normals[0][0] + self.hold_seconds):
                    item = self._normals.popleft()
                else:
                    self._ready.wait(self.poll_seconds)  # a Warning wakes it at once
                    continue
            try:
                self._record(*item[1:])
            except Exception:
                log.exception("cannot record an event")

    def _may_send(self, deadline: float) -> bool:
        """Whether a held Normal Event may go: the function has been idle for
        ``quiet_seconds``, or ``deadline`` has passed. Once quiet, the following Events go
        out at once until the next pass starts."""
        if self._busy is None:
            return True
        now = time.monotonic()
        if self._busy():
            self._quiet_since = None
        elif self._quiet_since is None:
            self._quiet_since = now
        return ((self._quiet_since is not None and now - self._quiet_since >= self.quiet_seconds)
                or now >= deadline)

    def _record(self, obj: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        uid = str(meta.get("uid", ""))
        digest = hashlib.sha256(f"{uid}/{reason}/{message}".encode()).hexdigest()[:16]
        name = f"{meta.get('name', 'object')}.{digest}"[:253]
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": meta.get("name"),
                "namespace": meta.get("namespace") or "",
                "uid": uid,
                "resourceVersion": meta.get("resourceVersion"),
            },
            "type": event_type,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.kube.create(event, res=resources.EVENTS)
        except ApiError as exc:
            if exc.status != 409:
                log.warning("cannot record event %s on %s: %s", reason, name, exc)
                return
            self._bump(namespace, name, now)
        except TemporaryError as exc:
            log.warning("cannot record event %s on %s: %s", reason, name, exc)

    def _bump(self, namespace: str, name: str, now: str) -> None:
        try:
            current = self.kube.get(resources.EVENTS, name, namespace)
            if current is None:
                return
            self.kube.patch(resources.EVENTS, name,
                            {"count": int(current.get("count") or 1) + 1, "lastTimestamp": now},
                            namespace)
        except (ApiError, TemporaryError) as exc:
            log.warning("cannot update event %s: %s", name, exc)

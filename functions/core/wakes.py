"""Wake-ups that outlive the process: a due time a pass asks for, kept as a PingSource.

A handler that must look at an object again later (an active deadline, a TTL, a pending
timeout, a retry) returns ``Result(requeue_after=...)``. The process keeps a timer for it,
which is precise but lives only as long as the process; a function scaled to zero has none.
So a due time further off than :data:`IN_PROCESS_SECONDS` is also written to the cluster as a
*wake*: a PingSource of the function's namespace, named after the function and the minute it
fires (``odh-training-wake-status-202612061204``), whose schedule is that minute (UTC, once)
and whose CloudEvent carries the extension ``function: <name>``. The Broker delivers it to that
function's Trigger alone, so Knative starts the function if it is at zero, and the function
passes over every parent it handles (each pass computes its own due times again from the
object: a started job's deadline from its ``startTime``, a finished one's TTL from its
``completionTime``) and deletes the wakes that have fired.

One wake covers every due time at or after its minute: its pass over all parents asks again
for the due times still ahead, which makes the next wake. A function therefore keeps a wake
only for a due time earlier than every wake it knows of, and a due time is met within a
minute (the PingSource fires at second 0 of the minute after it) plus the delivery.

Due times shorter than :data:`IN_PROCESS_SECONDS` stay in the process alone: Knative keeps a
replica for its stable window (60 s by default) after the last request, which is at least as
long, and the periodic resync stands behind a crash. Pure: no I/O here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from functions.core.times import parse_time, rfc3339

Obj = dict[str, Any]

PREFIX = "odh-training-wake-"
# Label of every wake, valued with the function it wakes.
FUNCTION_LABEL = "functions.opendatahub.io/wake"
# The minute a wake fires, RFC 3339 (its name holds it too, but names are not for parsing).
MINUTE_ANNOTATION = "functions.opendatahub.io/wake-at"
# The CloudEvent extension the Triggers route PingSource events by: a function's name for its
# wakes, ALL for the periodic resync (eventing/pingsource.yaml, eventing/triggers.yaml).
EXTENSION = "function"
ALL = "all"
# Due times closer than this stay in the process only (see the module's docstring).
IN_PROCESS_SECONDS = 30.0
PING_SOURCE_API = "sources.knative.dev/v1"


def wake_minute(due: datetime) -> datetime:
    """The first minute boundary at or after ``due`` (a PingSource fires at second 0)."""
    floor = due.astimezone(UTC).replace(second=0, microsecond=0)
    return floor if floor == due else floor + timedelta(minutes=1)


def wake_name(function: str, minute: datetime) -> str:
    return f"{PREFIX}{function}-{minute.astimezone(UTC):%Y%m%d%H%M}"


def schedule(minute: datetime) -> str:
    """A cron schedule that fires at ``minute`` (and again a year later, unless deleted)."""
    m = minute.astimezone(UTC)
    return f"{m.minute} {m.hour} {m.day} {m.month} *"


def wake_source(function: str, minute: datetime, namespace: str, broker: str) -> Obj:
    """The PingSource that wakes ``function`` at ``minute`` through ``broker``."""
    return {
        "apiVersion": PING_SOURCE_API,
        "kind": "PingSource",
        "metadata": {
            "name": wake_name(function, minute),
            "namespace": namespace,
            "labels": {FUNCTION_LABEL: function,
                       "app.kubernetes.io/part-of": "odh-training"},
            "annotations": {MINUTE_ANNOTATION: rfc3339(minute)},
        },
        "spec": {
            "schedule": schedule(minute),
            "timezone": "UTC",
            "contentType": "application/json",
            "data": json.dumps({"reason": "wake", "function": function,
                                "due": rfc3339(minute)}),
            "ceOverrides": {"extensions": {EXTENSION: function}},
            "sink": {"ref": {"apiVersion": "eventing.knative.dev/v1", "kind": "Broker",
                             "name": broker}},
        },
    }


def minute_of(source: Obj) -> datetime | None:
    """The minute a wake fires, from its annotation (``None`` for anything else)."""
    annotations = (source.get("metadata") or {}).get("annotations") or {}
    return parse_time(annotations.get(MINUTE_ANNOTATION))


def covered(pending: Iterable[datetime], minute: datetime, now: datetime) -> bool:
    """Whether a wake that has not fired yet (after ``now``) fires at or before ``minute``."""
    return any(now < known <= minute for known in pending)


def fired(minutes: Iterable[datetime], now: datetime) -> list[datetime]:
    """The wakes whose minute has come (they fired, or fire now: either way, done)."""
    return sorted(m for m in minutes if m <= now)

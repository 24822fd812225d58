"""The rules every lifecycle (a training job's, the Trainer's) follows: transitions read from an
object's conditions, their ids, and the outbox of what was sent.

A condition keeps the time of its last transition, so ``(uid, transition, lastTransitionTime)``
names one transition of one object: every replica, every retried pass and every redelivered
event computes the same id for it, and the same transition happening twice (two restarts, two
suspensions) gets two ids. What was sent is recorded on the object in the
:data:`SENT_ANNOTATION` (the time of the last transition sent, per transition): a transition
later than that is owed. Transitions from before a destination existed are not owed to it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from functions.core.times import parse_time, rfc3339

Obj = dict[str, Any]
# What a condition (wire form) records, if anything: a transition's name.
NameOf = Callable[[Obj], str | None]

SENT_ANNOTATION: Final = "training.opendatahub.io/lifecycle-sent"
SPEC_VERSION: Final = "1.0"


@dataclass(frozen=True, slots=True)
class Transition:
    name: str
    at: datetime
    stamp: str              # ``at`` as the status wrote it (part of the id)
    reason: str = ""
    message: str = ""


@dataclass(frozen=True)
class Rules:
    """One lifecycle: which conditions are transitions, and their order within one moment."""

    name_of: NameOf
    order: Sequence[str]

    def transitions(self, status: Obj) -> list[Transition]:
        """The transitions a status (wire form) records, oldest first."""
        found: list[Transition] = []
        for cond in status.get("conditions") or []:
            name = self.name_of(cond)
            stamp = str(cond.get("lastTransitionTime") or "")
            at = parse_time(stamp)
            if name is None or at is None:
                continue
            found.append(Transition(name, at, stamp, str(cond.get("reason") or ""),
                                    str(cond.get("message") or "")))
        return self.ordered(found)

    def ordered(self, found: Iterable[Transition]) -> list[Transition]:
        return sorted(found, key=lambda t: (t.at, self.order.index(t.name)))

    def sent_record(self, annotations: Obj | None) -> dict[str, datetime]:
        """The :data:`SENT_ANNOTATION` read back; an unreadable record is empty (at worst, a
        transition is sent again)."""
        raw = (annotations or {}).get(SENT_ANNOTATION)
        try:
            parsed = json.loads(raw) if isinstance(raw, str) else {}
        except ValueError:
            return {}
        if not isinstance(parsed, dict):
            return {}
        record: dict[str, datetime] = {}
        for name, stamp in parsed.items():
            at = parse_time(stamp)
            if at is not None and name in self.order:
                record[name] = at
        return record

    def owed(self, statuses: list[Obj], sent: dict[str, datetime],
             since: datetime | None) -> list[Transition]:
        """The transitions the ``statuses`` show that are later than the last sent of their
        kind and not before ``since`` (when the destination appeared), oldest first, once."""
        unique: dict[tuple[str, str], Transition] = {}
        for status in statuses:
            for t in self.transitions(status):
                last = sent.get(t.name)
                if (last is None or t.at > last) and (since is None or t.at >= since):
                    unique.setdefault((t.name, t.stamp), t)
        return self.ordered(unique.values())


def sent_patch(sent: dict[str, datetime], delivered: list[Transition]) -> Obj:
    """The merge patch recording ``delivered`` on top of ``sent``."""
    record = {name: rfc3339(at) for name, at in sent.items()}
    for t in delivered:
        if t.name not in record or t.at > sent.get(t.name, t.at):
            record[t.name] = t.stamp
    return {"metadata": {"annotations": {SENT_ANNOTATION: json.dumps(
        record, sort_keys=True, separators=(",", ":"))}}}


def event_id(uid: str, t: Transition) -> str:
    return f"{uid}/{t.name}/{t.stamp}"

"""Catching up after a watch gap: what an event source may have lost when the API server ended
the watches, handed to the functions again.

When the API server ends its watches (it restarts, or its watch cache of a resource starts
over under load and ends every watcher of it at once), each watcher resumes from the last
version it saw. The ApiServerSource adapter cannot always: a resumed watch that is refused as
too old, or that ends at once, makes its reflector list again, and the adapter's store does
nothing with a list (knative.dev/eventing v0.49.2 ``pkg/adapter/apiserver/delegate.go``:
``Replace`` is a no-op). Every change between its last event and that list is then never
sent, and with no resync a job whose pods turned Running in that gap keeps its old status.

The functions' own informers (:mod:`functions.kube.cache`) see the same resets, since the
server ends everyone's watches together, and they lose nothing: a re-list replaces their
store. So each informer keeps a short :class:`Journal` of the changes it applied, and a reset
of its watch (what would make a reflector list again: a refused watch, or one that ended at
once with nothing) arms a :class:`CatchUp`: at a few moments after it (the adapter's retries
back off for up to a minute or more), the changes applied since shortly before the reset are
handed to the functions. Each hand-over covers what was applied since the previous one, up to a few
seconds ago (what changed since may still be on its way as an event), so a function can leave
out what its events already brought it and run one pass for each parent the rest concerns
(:meth:`functions.runtime.dispatch.Dispatcher.catch_up`).

The API server also ends one watcher alone: a watcher too slow to take its events (the
adapter sends each event before it reads the next, so a busy Broker ingress makes it slow)
is closed, and its reflector may then list again. The functions' own watches go on, so no
reset tells them. :meth:`CatchUp.watch` therefore also sweeps each journal every
:data:`SWEEP_SECONDS`: what changed at least :data:`SWEEP_HOLD_SECONDS` ago (time enough for
its event to come through a busy Broker) is handed over like a gap's changes, and the
function leaves out what an event or a later pass of its own already covered. A sweep waits
until its functions have had no event for :data:`SWEEP_QUIET_SECONDS` (at most
:data:`SWEEP_DEFER_SECONDS`): a safety net should not compete with a burst for the CPU.
A replica that shares its Trigger with others sees only its share of the events, so its
sweep runs some passes another replica already ran; a pass that finds nothing to change
writes nothing.

A burst queues events in the Broker for longer than either hold: a 1,000-job burst's events
reach the functions half a minute or more after the watch saw their changes. A hand-over of a
change whose event is still queued runs a pass ahead of it, and on a replica whose sibling
gets that event, the two passes race (both create the job's pods, and one is refused). So
each hold is lengthened by how far behind the watch the events have come lately
(:class:`DeliveryLag`, from the events' ``time``).

This is a safety net for a known loss, not the mechanism: events drive the functions, and
the periodic resync stays the guarantee (a replica that was not running, or a resource no
function caches, is left to it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

log = logging.getLogger(__name__)

Obj = dict[str, Any]

# When, after a reset, the changes are handed over (seconds): soon for a brief reset, and as
# late as a client-go reflector's backed-off retry (its backoff grows to 30 s, with as much
# jitter again) for an adapter that took long to list again.
CATCH_UP_AFTER = (5.0, 10.0, 30.0, 90.0)
# How far before the reset the first hand-over reaches: other watchers' watches may have
# ended a moment before this one.
LOOKBACK_SECONDS = 5.0
# A hand-over stops this long before its own time: a change that recent may still be on its
# way through the Broker, and the next hand-over covers it if it was lost.
HOLD_SECONDS = 4.0
# Hand-overs of one watch closer together than this are one (resets come in bursts).
MERGE_SECONDS = 1.0
# The sweep of every journal (:meth:`CatchUp.watch`): how often, and how old a change must be
# before a missing event is taken as lost (a burst's events queue in the Broker for seconds).
SWEEP_SECONDS = 10.0
SWEEP_HOLD_SECONDS = 30.0
# A sweep waits for its functions to be quiet (no event for this long), so that its passes
# do not compete with a burst's events, but no longer than SWEEP_DEFER_SECONDS.
SWEEP_QUIET_SECONDS = 2.0
SWEEP_DEFER_SECONDS = 300.0
# How often a deferred sweep looks again.
DEFERRED_RETRY_SECONDS = 1.0
# The delivery lag that lengthens the holds: the longest seen over this window, counted at
# most up to the limit (a clock far off between the event source and a function must not
# hold the sweep back for longer than the journal keeps a change).
LAG_WINDOW_SECONDS = 120.0
LAG_LIMIT_SECONDS = 240.0
# How long the journal keeps a change: past the widest interval between hand-overs (a
# sweep that waited as long as it may, with the longest hold).
JOURNAL_SECONDS = 600.0
JOURNAL_LIMIT = 200_000


# What a journal keeps of an object: enough to name it and to find its parent (a child's
# mapping to its parent reads only these, see functions.runtime.registry.ChildMapping).
_KEPT_METADATA = ("name", "namespace", "uid", "resourceVersion", "labels", "ownerReferences")


OPERATIONS = {"ADDED": "add", "MODIFIED": "update", "DELETED": "delete"}


@dataclass(frozen=True, slots=True)
class Change:
    """One journaled change: the operation as an ApiServerSource event names it (``add``,
    ``update``, ``delete``), the object's :func:`reference`, when the informer applied it
    (the journal's clock), and whether it changed the object's ``status`` alone (see
    :func:`status_only`)."""

    operation: str
    obj: Obj
    at: float = 0.0
    status_only: bool = False


# Metadata a write of the status subresource changes too.
_VOLATILE_METADATA = frozenset({"resourceVersion", "managedFields"})


def status_only(old: Obj | None, new: Obj) -> bool:
    """Whether ``new`` differs from ``old`` in its ``status`` alone (a controller's status
    write, a kubelet's pod status): for a parent that is mostly the functions' own output,
    which a sweep need not hand back to every function (``Controller.status_inputs``)."""
    if old is None:
        return False
    if any(old.get(k) != new.get(k) for k in (old.keys() | new.keys()) - {"status", "metadata"}):
        return False
    before, after = old.get("metadata") or {}, new.get("metadata") or {}
    return all(before.get(k) == after.get(k)
               for k in (before.keys() | after.keys()) - _VOLATILE_METADATA)


def reference(obj: Obj) -> Obj:
    """What names ``obj`` and its parent, and its conditions that are true (their types)."""
    meta = obj.get("metadata") or {}
    kept: Obj = {"metadata": {k: meta[k] for k in _KEPT_METADATA if k in meta}}
    for field_name in ("apiVersion", "kind"):
        if field_name in obj:
            kept[field_name] = obj[field_name]
    conditions = (obj.get("status") or {}).get("conditions") or []
    true = [{"type": c.get("type"), "status": "True"} for c in conditions
            if isinstance(c, dict) and c.get("status") == "True"]
    if true:
        kept["status"] = {"conditions": true}
    return kept


def true_conditions(ref: Obj) -> set[str]:
    """The types of the conditions that are true in a :func:`reference`."""
    return {str(c.get("type")) for c in (ref.get("status") or {}).get("conditions") or []}


class Journal:
    """The changes an informer applied (a :func:`reference` of each), with when; bounded by
    age and by count."""

    def __init__(self, keep_seconds: float = JOURNAL_SECONDS, limit: int = JOURNAL_LIMIT,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.keep_seconds = keep_seconds
        self.clock = clock
        self._entries: deque[tuple[float, Change]] = deque(maxlen=limit)
        self._lock = threading.Lock()

    def record(self, events: Iterable[tuple[str, Obj]], *, status_only: bool = False) -> None:
        """Watch events (``ADDED``, ``MODIFIED``, ``DELETED``) applied now; ``status_only``:
        they changed their objects' status alone."""
        with self._lock:
            now = self.clock()
            self._entries.extend(
                (now, Change(OPERATIONS[kind], reference(obj), now, status_only))
                for kind, obj in events if kind in OPERATIONS)
            horizon = now - self.keep_seconds
            while self._entries and self._entries[0][0] < horizon:
                self._entries.popleft()

    def since(self, moment: float, hold: float = 0.0) -> tuple[list[Change], float]:
        """The latest change of each object changed from ``moment`` until ``hold`` seconds
        ago, and the moment this answer reaches to (where the next one starts).

        A change counts as of the ``status`` alone only if every change of that object in the
        span was: a status write that followed a change of the spec (whose event may be the
        one lost) must not hide it from a function that does not read the status."""
        latest: dict[tuple[str, str], Change] = {}
        with self._lock:
            upto = max(moment, self.clock() - hold)
            for at, change in reversed(self._entries):
                if at < moment:
                    break
                if at >= upto:
                    continue
                meta = change.obj.get("metadata") or {}
                name = (str(meta.get("namespace") or ""), str(meta.get("name")))
                later = latest.get(name)
                if later is None:
                    latest[name] = change
                elif later.status_only and not change.status_only:
                    latest[name] = replace(later, status_only=False)
        return list(reversed(latest.values())), upto

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


class DeliveryLag:
    """How far behind the watch the events come: the longest delay (an event's receipt less
    its ``time``, which the event source sets when its watch sees the change) observed in the
    last ``window`` seconds, at most ``limit``."""

    def __init__(self, window: float = LAG_WINDOW_SECONDS, limit: float = LAG_LIMIT_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.window = window
        self.limit = limit
        self.clock = clock
        # (when observed, delay), delays falling from left to right: a delay is dropped once
        # a longer one comes after it, since it can no longer be the window's longest.
        self._delays: deque[tuple[float, float]] = deque()
        self._lock = threading.Lock()

    def observe(self, seconds: float) -> None:
        """An event arrived ``seconds`` after its change was seen (negative for a clock
        ahead of the source's: counted as none)."""
        delay = min(max(seconds, 0.0), self.limit)
        with self._lock:
            while self._delays and self._delays[-1][1] <= delay:
                self._delays.pop()
            self._delays.append((self.clock(), delay))

    def recent(self) -> float:
        """The longest delay observed in the window (0 when none was)."""
        with self._lock:
            horizon = self.clock() - self.window
            while self._delays and self._delays[0][0] < horizon:
                self._delays.popleft()
            return self._delays[0][1] if self._delays else 0.0


class Journaled(Protocol):
    """What :class:`CatchUp` needs of an informer: a name (for logs) and its journal."""

    name: str
    journal: Journal


@dataclass
class _Gap:
    """The hand-overs still due of one watch: a reset's (``every`` is ``None``) or its sweep's
    (due again every ``every`` seconds)."""

    source: Journaled
    scanned_to: float
    hold: float
    due: list[float] = field(default_factory=list)
    every: float | None = None
    deferred_since: float | None = None


class CatchUp:
    """Hands the changes around each watch reset to ``deliver`` (from one background thread,
    started on the first reset), at :data:`CATCH_UP_AFTER` after each reset of that watch
    (the schedules of resets in a row merged); each hand-over starts where the previous one of
    that watch stopped, and stops its hold plus ``lag()`` (the recent delivery lag, see
    :class:`DeliveryLag`) before its own time."""

    def __init__(self, deliver: Callable[[Journaled, list[Change]], None], *,
                 after: tuple[float, ...] = CATCH_UP_AFTER,
                 lookback: float = LOOKBACK_SECONDS, hold: float = HOLD_SECONDS,
                 merge: float = MERGE_SECONDS, sweep_every: float = SWEEP_SECONDS,
                 sweep_hold: float = SWEEP_HOLD_SECONDS, quiet: Callable[[], bool] | None = None,
                 defer_limit: float = SWEEP_DEFER_SECONDS,
                 lag: Callable[[], float] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.deliver = deliver
        self.lag = lag
        self.after = after
        self.lookback = lookback
        self.hold = hold
        self.merge = merge
        self.sweep_every = sweep_every
        self.sweep_hold = sweep_hold
        self.quiet = quiet
        self.defer_limit = defer_limit
        self.clock = clock
        self._gaps: dict[int, _Gap] = {}
        self._sweeps: dict[int, _Gap] = {}
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False

    def reset(self, source: Journaled) -> None:
        """``source``'s watch was ended or refused: others' may have been too."""
        now = self.clock()
        with self._wake:
            gap = self._gaps.get(id(source))
            if gap is None:
                gap = self._gaps[id(source)] = _Gap(source, now - self.lookback, self.hold)
            merged: list[float] = []
            for at in sorted([*gap.due, *(now + delay for delay in self.after)]):
                if not merged or at - merged[-1] >= self.merge:
                    merged.append(at)
            gap.due = merged
            self._start()

    def watch(self, source: Journaled) -> None:
        """Sweep ``source``'s journal from now on, every :attr:`sweep_every` seconds (no
        sweep when that is 0), each sweep once ``quiet()`` or after :attr:`defer_limit`
        seconds of waiting for it."""
        if self.sweep_every <= 0:
            return
        now = self.clock()
        with self._wake:
            if id(source) not in self._sweeps:
                self._sweeps[id(source)] = _Gap(source, now, self.sweep_hold,
                                                [now + self.sweep_every], self.sweep_every)
                self._start()

    def _start(self) -> None:
        """Start the thread if it is not running, and wake it to a new schedule (lock held)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name="watch-gap-catch-up")
            self._thread.start()
        self._wake.notify_all()

    def pending(self) -> int:
        """How many watches have a reset's hand-overs still to come."""
        with self._wake:
            return len(self._gaps)

    def stop(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify_all()

    def _run(self) -> None:
        while True:
            with self._wake:
                ready = self._take_due()
                while not ready and not self._stopping:
                    dues = [gap.due[0] for gap in self._scheduled() if gap.due]
                    self._wake.wait(max(0.0, min(dues) - self.clock()) if dues else None)
                    ready = self._take_due()
                if self._stopping:
                    return
            lag = self.lag() if self.lag is not None and ready else 0.0
            for gap, since in ready:
                source = gap.source
                changed, upto = source.journal.since(since, gap.hold + lag)
                with self._wake:
                    gap.scanned_to = max(gap.scanned_to, upto)
                if changed:
                    try:
                        self.deliver(source, changed)
                    except Exception:
                        log.exception("catching up on the %s watch's gap failed", source.name)

    def _scheduled(self) -> list[_Gap]:
        return [*self._gaps.values(), *self._sweeps.values()]

    def _take_due(self) -> list[tuple[_Gap, float]]:
        """The hand-overs due now, each with where it starts (lock held)."""
        now = self.clock()
        ready: list[tuple[_Gap, float]] = []
        for ident, gap in list(self._gaps.items()):
            if gap.due and gap.due[0] <= now:
                gap.due = [at for at in gap.due if at > now]
                ready.append((gap, gap.scanned_to))
                if not gap.due:
                    del self._gaps[ident]
        for sweep in self._sweeps.values():
            if sweep.due[0] > now or sweep.every is None:
                continue
            if sweep.deferred_since is None:
                sweep.deferred_since = now
            if (self.quiet is not None and now - sweep.deferred_since < self.defer_limit
                    and not self.quiet()):
                sweep.due = [now + DEFERRED_RETRY_SECONDS]
                continue
            sweep.due, sweep.deferred_since = [now + sweep.every], None
            ready.append((sweep, sweep.scanned_to))
        return ready

"""From one parsed event to handler calls: which keys need work, run them safely, one verdict.

An event is only a hint that a key may need work. A parent's event names its own key; a
child's event (a Pod, a Service, a Deployment) names its parent's key through the controller's
:class:`~functions.runtime.registry.ChildMapping` (in Reference mode the child is read first,
since the event carries no object). A resync tick or a wake passes over every parent of the
function's kinds (:mod:`functions.runtime.resyncs`).

Runs of one route (a controller's handler for one key) are serialised and coalesced within the
process: a delivery that arrives while a pass for its route is running waits for the next pass,
which starts after it arrived and therefore covers it, and answers with that pass's outcome.
A burst of events about one job (its pods starting one by one) thus costs a pass or two, not
one per event, and no delivery is answered before a pass that saw its change has finished.
Across processes (replicas) nothing is serialised: handlers are written to be safe when they
run concurrently on one key (preconditions, names that make a second create a 409). Every run
ends in an
:class:`Outcome` the HTTP layer maps to a status: ``ok``/``ignored`` (2xx), ``invalid`` (4xx,
never retried), ``retry``/``busy`` (503/429 with ``Retry-After``, so the Broker retries).
A handler bug (an unexpected exception) is logged with its traceback and answered as
``retry`` with a long ``Retry-After``: the Broker retries a bounded number of times and then
dead-letters the event, which keeps the evidence, where a 500 would simply be dropped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Protocol

from functions.core.errors import PermanentError, TemporaryError
from functions.core.event_sources import SETTLE_SECONDS, is_adapter_pod
from functions.core.events import ApiEvent
from functions.core.keys import ObjectKey
from functions.core.wakes import ALL, EXTENSION
from functions.kube.client import ApiError
from functions.kube.gaps import reference
from functions.kube.store import version_of
from functions.runtime import resyncs
from functions.runtime.outcomes import (
    BUG_RETRY_AFTER,
    BUSY_RETRY_AFTER,
    CONFLICT_RETRY_AFTER,
    Outcome,
    Route,
    RouteId,
    combine,
    route_id,
)
from functions.runtime.passes import (
    Coalescer,
    KeyLocks,
    OwnWrites,
    PassTimes,
    SeenVersions,
)
from functions.runtime.registry import Context, Controller, FunctionName, Obj, Reader, Result
from functions.runtime.timers import RequeueTimers

if TYPE_CHECKING:
    from functions.kube.client import KubeClient
    from functions.kube.gaps import Change
    from functions.kube.resources import Resource
    from functions.runtime.recorder import EventRecorder
    from functions.runtime.wakes import Wakes

log = logging.getLogger(__name__)
# How the API server words a write refused because the namespace is being deleted.
TERMINATING = "because it is being terminated"


class Observer(Protocol):
    """Receives one call per handler run (for metrics)."""

    def handler_finished(self, function: str, controller: str, seconds: float,
                         outcome: str) -> None: ...


class Dispatcher:
    """Routes events of one function (``reconcile``, ``gc`` or ``status``) to handlers."""

    def __init__(self, function: FunctionName, controllers: Sequence[Controller],
                 kube: Callable[[], KubeClient], recorder: Callable[[], EventRecorder], *,
                 reader: Callable[[], Reader] | None = None, locks: KeyLocks | None = None,
                 observer: Observer | None = None, resync_workers: int = 4,
                 lock_timeout: float = 60.0, source_settle: float = SETTLE_SECONDS,
                 not_sent: frozenset[tuple[str, str]] = frozenset(),
                 wakes: Wakes | None = None,
                 synced: Callable[[float], bool] | None = None) -> None:
        self.function: FunctionName = function
        self.controllers = [c for c in controllers if function in c.handlers]
        self.kube = kube
        self.reader = reader
        self.recorder = recorder
        self.runs = Coalescer()
        self.locks = locks
        self.observer = observer
        self.resync_workers = resync_workers
        self.lock_timeout = lock_timeout
        self.source_settle = source_settle
        self.timers = RequeueTimers(self.run)
        # due times the process may not live to see (functions.core.wakes)
        self.wakes = wakes
        # waits up to the given seconds for the watch caches to fill; whether they did
        self.synced = synced
        # held by the one pass over every parent that may run at a time
        self.whole_pass = threading.Lock()
        # (kind, operation) pairs this function's Trigger never sends it
        self.not_sent = not_sent
        self.seen = SeenVersions()
        self.passed = PassTimes()
        self.last_event = float("-inf")   # time.monotonic() of the latest event
        self.own_writes = OwnWrites()

    # -- routing ----------------------------------------------------------------------------

    def routes(self, event: ApiEvent) -> list[Route]:
        """The (controller, key) pairs an object event concerns (empty for a resync)."""
        ref = event.ref
        if ref is None:
            return []
        child: Obj | None = event.object
        if child is None and any(_has_child_kind(c, ref.api_version, ref.kind)
                                 for c in self.controllers):
            child = self._read_child(event)
        return _unique(self._routes_of(ref.api_version, ref.kind, ref.key(), child))

    def _routes_of(self, api_version: str, kind: str, key: ObjectKey,
                   obj: Obj | None) -> list[Route]:
        """The routes a change of ``obj`` (``None``: unknown, gone) concerns."""
        found: list[Route] = []
        for controller in self.controllers:
            if controller.owns(api_version, kind):
                found.append(Route(controller, key))
            elif obj is not None and _has_child_kind(controller, api_version, kind):
                found.extend(Route(controller, parent)
                             for parent in controller.parents_of(api_version, kind, obj))
        return found

    def _read_child(self, event: ApiEvent) -> Obj | None:
        """Reference mode: the event names the child only, so read it (``None`` if gone)."""
        assert event.ref is not None
        ref = event.ref
        kube = self.kube()
        try:
            resource = kube.resource_for(ref.api_version, ref.kind)
        except ApiError as exc:
            log.info("cannot resolve %s %s: %s", ref.api_version, ref.kind, exc)
            return None
        obj = kube.get(resource, ref.name, ref.namespace or None)
        if obj is None:
            log.info("%s is gone; its parent is left to the next resync", ref.key())
        return obj

    # -- running ------------------------------------------------------------------------------

    def handle(self, event: ApiEvent, *, fresh: bool = False,
               status_alone: bool = False) -> Outcome:
        """Run what ``event`` concerns; ``fresh``: read from the API server, not the reader
        (the reader has not caught up with this event); ``status_alone``: the event's change
        touched its parent's status alone, which leaves out the handlers that do not read it
        (``Controller.status_inputs``)."""
        self.last_event = time.monotonic()
        if event.operation == "resync":
            target = event.extensions.get(EXTENSION) or ALL
            if target == ALL:
                return self.resync()
            if target != self.function:
                return Outcome("ignored", f"a wake of the {target} function")
            return self.wake()
        if event.ref is not None and event.object is not None:
            version = version_of(event.object)
            if event.operation == "update" and self.own_writes.echo(event.ref.key(), version):
                self.seen.saw(event.ref.key(), version)
                return Outcome("ignored", "the event of this function's own write")
        if (event.ref is not None and event.ref.kind == "Pod" and event.object is not None
                and is_adapter_pod(event.object)):
            return self.after_adapter_event(event)
        try:
            routes = self.routes(event)
        except TemporaryError as exc:
            return Outcome("retry", str(exc), exc.retry_after, 0, "temporary")
        if not routes:
            return Outcome("ignored", "no controller handles this object")
        if status_alone and event.ref is not None and event.object is not None:
            api_version, kind = event.ref.api_version, event.ref.kind
            ref = reference(event.object)
            routes = [r for r in routes
                      if self._takes_status(r.controller, api_version, kind, ref)]
            if not routes:
                # Not seen: the versions before it may hold changes no pass has covered.
                return Outcome("ignored", "a change of the status alone, which this "
                               "function's handlers do not read")
        if event.ref is not None and event.object is not None:
            self.seen.saw(event.ref.key(), version_of(event.object))
        return combine([self.run(route, fresh=fresh) for route in routes])

    def reads_status(self, event: ApiEvent) -> bool:
        """Whether a handler of this function reads the status ``event`` brings, when its
        change touched the status of its object (a parent) alone."""
        if event.ref is None or event.object is None:
            return True
        ref = reference(event.object)
        api_version, kind = event.ref.api_version, event.ref.kind
        return any(self._takes_status(c, api_version, kind, ref) for c in self.controllers
                   if c.owns(api_version, kind))

    def run(self, route: Route, *, fresh: bool = False) -> Outcome:
        """Run one handler pass for ``route`` (or share one, see :class:`Coalescer`); never
        raises."""
        def attempt(fresh: bool) -> Outcome:
            if self.locks is None:
                return self._attempt_twice(route, fresh)
            with self.locks.hold(route.key, self.lock_timeout) as acquired:
                if not acquired:
                    return Outcome("busy", f"{route.key} is busy", BUSY_RETRY_AFTER)
                return self._attempt_twice(route, fresh)

        return self.runs.run(route_id(route), attempt, self.lock_timeout, fresh=fresh)

    def _attempt_twice(self, route: Route, fresh: bool) -> Outcome:
        """A conflict is retried at once, reading fresh state: the second attempt sees what
        won."""
        outcome = self._attempt(route, fresh)
        if outcome.cause == "conflict":
            outcome = self._attempt(route, True)
        return outcome

    def _attempt(self, route: Route, fresh: bool) -> Outcome:
        controller, key = route.controller, route.key
        handler = controller.handlers[self.function]
        started, since = time.perf_counter(), time.monotonic()
        outcome: Outcome
        try:
            kube = self.kube()
            ctx = Context(kube=kube, recorder=self.recorder(), function=self.function,
                          log=logging.getLogger(f"functions.{controller.name}"),
                          reader=kube if fresh or self.reader is None else self.reader())
            result = handler(ctx, key)
        except TemporaryError as exc:
            outcome = Outcome("retry", f"{key}: {exc}", exc.retry_after, 1, "temporary")
        except PermanentError as exc:
            outcome = Outcome("invalid", f"{key}: {exc}", 0.0, 1)
        except ApiError as exc:
            if exc.conflict:
                outcome = Outcome("retry", f"{key}: conflict survived a retry: {exc}",
                                  CONFLICT_RETRY_AFTER, 1, "conflict")
            elif self._went_away(exc, controller, key):
                log.info("%s %s: %s went away during its pass (%s)", controller.name,
                         self.function, key, exc)
                outcome = Outcome("ok", "", 0.0, 1)
            else:
                log.exception("%s %s handler failed on %s", controller.name, self.function, key)
                outcome = Outcome("retry", f"{key}: handler failed: {exc}", BUG_RETRY_AFTER, 1,
                                  "bug")
        except Exception as exc:
            log.exception("%s %s handler failed on %s", controller.name, self.function, key)
            outcome = Outcome("retry", f"{key}: handler failed: {type(exc).__name__}: {exc}",
                              BUG_RETRY_AFTER, 1, "bug")
        else:
            outcome = Outcome("ok", "", 0.0, 1)
            self.passed.ran(route_id(route), since)
            if isinstance(result, Result):
                if result.wrote is not None:
                    self.own_writes.wrote(key, result.wrote)
                    self.seen.saw(key, result.wrote)
                if result.requeue_after is not None:
                    self.timers.schedule(route, result.requeue_after)
                    if self.wakes is not None:
                        self.wakes.ask(result.requeue_after)
        if self.observer is not None:
            self.observer.handler_finished(self.function, controller.name,
                                           time.perf_counter() - started, _label(outcome))
        return outcome

    def _went_away(self, exc: ApiError, controller: Controller, key: ObjectKey) -> bool:
        """Whether a write refused as not found, or as made in a namespace being deleted,
        failed because the parent or its namespace went away during the pass (a fresh read
        finds it gone): nothing is left to do. Any other such refusal is a bug."""
        terminating = exc.status == 403 and TERMINATING in exc.message
        if not (exc.not_found or terminating):
            return False
        try:
            current = self.kube().get(controller.parent, key.name, key.namespace or None)
        except Exception:  # the read failing says nothing about the parent
            return False
        return current is None or terminating

    # -- catching up --------------------------------------------------------------------------

    def catch_up(self, res: Resource, changed: Sequence[Change]) -> None:
        """Run the parents of objects whose changes their events may not have reached
        (:mod:`functions.kube.gaps`), leaving out the changes this function's Trigger never
        sends it, those an event or this function's own write already brought (at that
        version or later), a parent's status changes its handler does not read
        (``Controller.status_inputs``), and parents a pass started after the change has
        covered (a pass reads a cache that had the change, or the API server); a pass that
        asks for a retry gets a requeue timer, as no Broker retries it."""
        missed: list[Route] = []
        found = 0
        for change in changed:
            key = _key_of(res, change.obj)
            if ((res.kind, change.operation) in self.not_sent
                    or self.seen.has(key, version_of(change.obj))):
                continue
            routes = [route for route in self._routes_of(res.api_version, res.kind, key,
                                                         change.obj)
                      if not self.passed.since(route_id(route), change.at)
                      and self._is_input(route, res, change)]
            if routes:
                found += 1
                missed.extend(routes)
        routes = _unique(missed)
        if not routes:
            return
        log.info("%s: %d passes for %d of %d %s changes no event has brought", self.function,
                 len(routes), found, len(changed), res.plural)
        with ThreadPoolExecutor(max_workers=self.resync_workers,
                                thread_name_prefix=f"catch-up-{self.function}") as pool:
            outcomes = list(pool.map(self.run, routes))
        for route, outcome in zip(routes, outcomes, strict=True):
            if outcome.retriable:
                self.timers.schedule(route, outcome.retry_after)

    def quiet(self, seconds: float) -> bool:
        """Whether no event has come for ``seconds``."""
        return time.monotonic() - self.last_event >= seconds

    def _is_input(self, route: Route, res: Resource, change: Change) -> bool:
        """Whether ``change`` is an input of ``route``'s handler in this function: a change of
        the parent's status alone is one only if its controller says so."""
        return not change.status_only or self._takes_status(route.controller, res.api_version,
                                                            res.kind, change.obj)

    def _takes_status(self, controller: Controller, api_version: str, kind: str,
                      ref: Obj) -> bool:
        """Whether ``controller``'s handler in this function reads a status-only change of an
        object of ``kind`` (a :func:`~functions.kube.gaps.reference` of it): always for a
        child, for its parent only if ``status_inputs`` says so."""
        if not controller.owns(api_version, kind):
            return True
        takes = controller.status_inputs.get(self.function)
        return takes is None or takes(ref)

    # -- passes over every parent (functions.runtime.resyncs) ------------------------------------

    def after_adapter_event(self, event: ApiEvent) -> Outcome:
        return resyncs.after_adapter_event(self, event)

    def resync(self) -> Outcome:
        return resyncs.resync(self)

    def wake(self) -> Outcome:
        return resyncs.wake(self)


def _key_of(res: Resource, obj: Obj) -> ObjectKey:
    meta = obj.get("metadata") or {}
    return ObjectKey(res.api_version, res.kind, str(meta.get("namespace") or ""),
                     str(meta.get("name") or ""))


def _unique(routes: list[Route]) -> list[Route]:
    unique: dict[RouteId, Route] = {}
    for route in routes:
        unique.setdefault(route_id(route), route)
    return list(unique.values())


def _label(outcome: Outcome) -> str:
    return outcome.cause or outcome.kind


def _has_child_kind(controller: Controller, api_version: str, kind: str) -> bool:
    group = api_version.rpartition("/")[0]
    return any(child.kind == kind and child.api_version.rpartition("/")[0] == group
               for child in controller.children)

"""How passes of one route are run: at most one at a time per route in a process, with the
deliveries that arrive meanwhile sharing the next (:class:`Coalescer`); across the functions
one process serves, one key at a time (:class:`KeyLocks`); and which events are only the echo
of a pass's own write (:class:`OwnWrites`). "Look again later" timers are
:mod:`functions.runtime.timers`."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from functions.core.keys import ObjectKey
from functions.runtime.outcomes import (
    BUG_RETRY_AFTER,
    BUSY_RETRY_AFTER,
    Outcome,
    RouteId,
    _lock_id,
)

log = logging.getLogger(__name__)


class KeyLocks:
    """One lock per key, created on demand and dropped when nobody holds or awaits it. Shared
    by the dispatchers of one process that serves several functions (``serve all``), so their
    handlers take turns on a key there as they would on a quiet cluster; separate processes
    run them concurrently, which the handlers are written for."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[tuple[str, str, str, str], tuple[threading.Lock, int]] = {}

    @contextmanager
    def hold(self, key: ObjectKey, timeout: float) -> Iterator[bool]:
        ident = _lock_id(key)
        with self._guard:
            lock, users = self._locks.get(ident, (threading.Lock(), 0))
            self._locks[ident] = (lock, users + 1)
        acquired = lock.acquire(timeout=timeout)
        try:
            yield acquired
        finally:
            if acquired:
                lock.release()
            with self._guard:
                lock, users = self._locks[ident]
                if users <= 1:
                    del self._locks[ident]
                else:
                    self._locks[ident] = (lock, users - 1)

    def __len__(self) -> int:
        with self._guard:
            return len(self._locks)


@dataclass
class _Runs:
    """Bookkeeping of one route: requests are numbered; a pass covers every request numbered
    up to the count when it started."""

    wake: threading.Condition
    requested: int = 0
    completed: int = 0
    running: bool = False
    users: int = 0
    fresh: bool = False   # a waiting request wants the next pass to read fresh state
    outcome: Outcome | None = None


class Coalescer:
    """At most one pass per route at a time; requests that arrive meanwhile share the next."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._routes: dict[RouteId, _Runs] = {}

    def run(self, ident: RouteId, attempt: Callable[[bool], Outcome], timeout: float, *,
            fresh: bool = False) -> Outcome:
        """``attempt(fresh)`` (which must not raise) once for this request and any that arrive
        while it runs, or the outcome of a pass that started after this request arrived. A
        pass reads fresh state when any request it covers asked for that."""
        with self._guard:
            runs = self._routes.get(ident)
            if runs is None:
                runs = self._routes[ident] = _Runs(threading.Condition(self._guard))
            runs.requested += 1
            runs.users += 1
            runs.fresh = runs.fresh or fresh
            ticket = runs.requested
            deadline = time.monotonic() + timeout
            while runs.running:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._leave(ident, runs)
                    return Outcome("busy", f"{ident[1][3]} is busy", BUSY_RETRY_AFTER)
                runs.wake.wait(remaining)
                if runs.completed >= ticket and runs.outcome is not None:
                    self._leave(ident, runs)
                    return runs.outcome
            runs.running = True
            covers = runs.requested
            fresh, runs.fresh = runs.fresh, False
        outcome = Outcome("retry", "the pass was interrupted", BUG_RETRY_AFTER, 0, "bug")
        try:
            outcome = attempt(fresh)
        finally:
            with self._guard:
                runs.running = False
                runs.completed = covers
                runs.outcome = outcome
                runs.wake.notify_all()
                self._leave(ident, runs)
        return outcome

    def _leave(self, ident: RouteId, runs: _Runs) -> None:
        runs.users -= 1
        if runs.users == 0 and not runs.running:
            del self._routes[ident]

    def __len__(self) -> int:
        with self._guard:
            return len(self._routes)


class OwnWrites:
    """The versions this function's own conditional writes left parents at (a handler's
    ``Result.wrote``), by parent (any API version of its kind), each answered once.

    The status function writes a job's status on condition that the job is still at the
    version it read, so the event of the version it wrote is only the echo of that write: the
    pass that made it already took in all the event carries, and any later change comes with
    an event of its own. Answering that echo without a pass spares the status function one
    pass per status write (two of a job's three events in a burst). Another function's
    dispatcher keeps its own record: reconcile still takes the job events that the status
    writes cause. Bounded: when full, it starts over, which costs only passes it could have
    left out.
    """

    def __init__(self, limit: int = 10_000) -> None:
        self.limit = limit
        self._versions: dict[tuple[str, str, str, str], int] = {}
        self._guard = threading.Lock()

    def wrote(self, key: ObjectKey, version: int) -> None:
        ident = _lock_id(key)
        with self._guard:
            if len(self._versions) >= self.limit:
                self._versions.clear()
            self._versions[ident] = version

    def echo(self, key: ObjectKey, version: int | None) -> bool:
        """Whether ``version`` of ``key`` is what one of our writes left it at (forgotten
        once asked, so a redelivered event runs a pass like any other)."""
        if version is None:
            return False
        ident = _lock_id(key)
        with self._guard:
            if self._versions.get(ident) != version:
                return False
            del self._versions[ident]
            return True


class SeenVersions:
    """The newest version of each object an event brought to a pass, by object (any API
    version of its kind, as routes are; bounded: when full, it starts over, which only costs a
    catch-up some passes it could have left out). An event left out as a status change no
    handler reads is not one: the versions before it may hold changes no pass covered."""

    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self._versions: dict[tuple[str, str, str, str], int] = {}
        self._guard = threading.Lock()

    def saw(self, key: ObjectKey, version: int | None) -> None:
        if version is None:
            return
        ident = _lock_id(key)
        with self._guard:
            if len(self._versions) >= self.limit:
                self._versions.clear()
            if self._versions.get(ident, 0) < version:
                self._versions[ident] = version

    def has(self, key: ObjectKey, version: int | None) -> bool:
        if version is None:
            return False
        with self._guard:
            return self._versions.get(_lock_id(key), 0) >= version


class PassTimes:
    """When the latest pass of each route that ran to its end started (``time.monotonic``,
    the journal's clock); bounded like :class:`SeenVersions`."""

    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self._started: dict[RouteId, float] = {}
        self._guard = threading.Lock()

    def ran(self, ident: RouteId, started: float) -> None:
        with self._guard:
            if len(self._started) >= self.limit:
                self._started.clear()
            if self._started.get(ident, started) <= started:
                self._started[ident] = started

    def since(self, ident: RouteId, moment: float) -> bool:
        """Whether a pass of ``ident`` that started after ``moment`` has run."""
        with self._guard:
            return self._started.get(ident, float("-inf")) > moment

"""Python's full garbage collections, moved out of a burst into the quiet moments after it.

A function's long-lived objects are its watch caches: every pod, service and job of the
namespaces it watches, decoded from JSON into dicts and lists, which the cyclic collector
tracks. Under a burst each watch adds thousands of them, and CPython runs a full collection
whenever the objects that survived into the oldest generation grew by a quarter since the
last one; each walks every cached object again, and holds the interpreter (and the events
waiting for it) for as long as that takes: a large share of a second with a thousand jobs.

The objects are acyclic: reference counting frees each old version as its watch replaces it,
and a full collection finds little. So a worker raises the oldest generation's
threshold beyond reach (young and middle collections go on as before) and this
:class:`Collector` runs the full collections itself: once the function has had no event for
a moment (``quiet``) and has made objects since the last one, or after
:data:`LONGEST_SECONDS` under traffic that never quiets, so that cyclic garbage stays
bounded. What the warm-up loaded is frozen out of every collection
(:class:`functions.runtime.serve.FunctionServer`).
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger(__name__)

# A full collection is due once the middle generation has been collected this many times:
# never, in practice, so the collector's thread decides (CPython's default is 10).
OLDEST_THRESHOLD = 1_000_000
# How often the thread looks, how many young collections (made objects) make a full one
# worth running, and the longest it waits for a quiet moment.
CHECK_SECONDS = 1.0
MIN_YOUNG_COLLECTIONS = 20
LONGEST_SECONDS = 300.0


class GcModule(Protocol):
    """What the collector uses of :mod:`gc` (a test passes a recording one)."""

    def get_threshold(self) -> tuple[int, int, int]: ...

    def set_threshold(self, threshold0: int, threshold1: int = ...,
                      threshold2: int = ..., /) -> None: ...

    def get_stats(self) -> list[dict[str, int]]: ...

    def collect(self, generation: int = 2) -> int: ...


class Collector:
    """Full collections on a thread of their own, when ``quiet()`` says the function is
    idle (see the module)."""

    def __init__(self, quiet: Callable[[], bool], *, check_seconds: float = CHECK_SECONDS,
                 min_young: int = MIN_YOUNG_COLLECTIONS,
                 longest_seconds: float = LONGEST_SECONDS,
                 collector: GcModule = gc, clock: Callable[[], float] = time.monotonic) -> None:
        self.quiet = quiet
        self.check_seconds = check_seconds
        self.min_young = min_young
        self.longest_seconds = longest_seconds
        self.gc = collector
        self.clock = clock
        self.collections = 0
        self._young = self._young_collections()
        self._last = clock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Turn off CPython's own full collections and start the thread."""
        young, middle, _ = self.gc.get_threshold()
        self.gc.set_threshold(young, middle, OLDEST_THRESHOLD)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True, name="collector")
            self._thread.start()

    def stop(self) -> None:
        self._stopping.set()

    def _run(self) -> None:
        while not self._stopping.wait(self.check_seconds):
            try:
                self.step()
            except Exception:   # the thread must outlive a surprise; the next step tries again
                log.exception("a full garbage collection failed")

    def step(self) -> bool:
        """Run a full collection if one is due now; whether it ran."""
        young = self._young_collections()
        if young - self._young < self.min_young:
            return False
        if not self.quiet() and self.clock() - self._last < self.longest_seconds:
            return False
        started = time.perf_counter()
        found = self.gc.collect()
        self.collections += 1
        self._young, self._last = self._young_collections(), self.clock()
        log.debug("full garbage collection: %d unreachable, %.3f s", found,
                  time.perf_counter() - started)
        return True

    def _young_collections(self) -> int:
        return int(self.gc.get_stats()[0]["collections"])

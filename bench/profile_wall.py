"""Where a delivery's time goes: the wall clock of each function's request threads.

``py-spy --gil`` (:mod:`bench.profile`) counts the Python CPU a function spends; it cannot say
why a delivery takes long when its thread holds no GIL: waiting for the API server to answer a
write, for the pass of the same job that is running (the delivery shares the next,
:class:`functions.runtime.passes.Coalescer`), or for the watch cache to reach the version the
event announces. A second ``py-spy`` per process samples every thread, idle or not
(``--idle``); the samples of the request threads (those inside the worker's
``EventWorker.handle_request``, :mod:`functions.runtime.worker`, once past the wait for a
request slot) are put in one category each, decided by the frame nearest the leaf that names
one, and add up to the time the function spent in deliveries.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from bench import go_profile

# A sample belongs to a request thread when a frame of its stack is the worker handling a
# request whose head was read (functions/runtime/worker.py; not reading the next request's
# head), unless it is waiting there for a request slot.
REQUEST_THREAD = "EventWorker.handle_request ("
SLOTS = "RequestSlots.__call__ ("
# A pass's creates and deletes run in a pool of their own; the request thread waits for them here.
PARALLEL_WRITES = "_parallel (functions/jobs/writes.py"
# (category, substrings of a frame), nearest the leaf first: a thread blocked reading an
# answer has the socket read at its leaf, one waiting for the running pass has the
# coalescer's wait nearest it.
WALL_CATEGORIES: go_profile.Categories = (
    ("API requests (mostly waiting for the answer)",
     ("(functions/kube/transport.py", "(functions/kube/client.py", "(functions/kube/pools.py",
      "(ssl.py", PARALLEL_WRITES)),
    ("waiting for the running pass of the same job",
     ("(functions/runtime/passes.py",)),
    ("waiting for the watch cache to catch up", ("(functions/kube/store.py",
                                                  "(functions/kube/cache.py")),
    ("handlers (read, plan, status)", ("(functions/jobs/", "(functions/trainer/",
                                       "(functions/core/")),
    ("HTTP serving (gunicorn: read, parse, answer)",
     ("(functions/runtime/worker.py", "(gunicorn/", "(flask/", "(werkzeug/")),
    ("runtime (route, coalesce, answer)", ("(functions/runtime/",)),
)


def request_stacks(stacks: Iterable[tuple[list[str], int]]) -> list[tuple[list[str], int]]:
    """The samples taken in a request thread while it served a delivery."""
    return [(frames, count) for frames, count in stacks
            if any(REQUEST_THREAD in frame for frame in frames)
            and not _waiting_for_a_slot(frames)]


def _waiting_for_a_slot(frames: list[str]) -> bool:
    """Whether the sample waits for a request slot: the wait is a queue's ``get``, in C, so
    the request slots' own frame is the leaf."""
    return bool(frames) and SLOTS in frames[-1]


def summarise(stacks: Iterable[tuple[list[str], int]], rate: float) -> dict[str, Any]:
    """Seconds in deliveries, and seconds and shares per category, the largest first."""
    return go_profile.summarise([(frames[::-1], count / rate)
                                 for frames, count in request_stacks(stacks)], WALL_CATEGORIES)


def markdown(walls: Mapping[str, Mapping[str, Any] | None]) -> list[str]:
    """One table per system and function (``walls``: each system's summaries by function):
    where its deliveries' wall time went."""
    if not any(walls.values()):
        return []
    lines = ["## Where the deliveries' time goes (wall clock)", "",
             "A second `py-spy` per function samples every thread, idle or not (`--idle`): "
             "the samples of the request threads, while they serve a delivery, by what they "
             "were doing or waiting for. The seconds add up over the threads (two per "
             "function), so they can exceed the burst.", ""]
    for system, found in walls.items():
        for name, wall in (found or {}).items():
            lines += [f"### {name} ({system}): {wall['seconds']} s in deliveries", "",
                      *go_profile.category_table(wall["categories"]), ""]
    return lines

"""The informer's side of catching up after a watch gap (:mod:`functions.kube.gaps`): what
counts as a reset of its watch, and what a re-list journals, with a scripted client."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

from functions.core.errors import TemporaryError
from functions.kube import resources
from functions.kube.cache import CacheSpec, Informer
from functions.kube.client import ApiError
from tests.kube.test_gaps import LABEL, pod


class ScriptedKube:
    """The client calls an informer makes, answered from a script: each ``list_pages`` and
    ``watch`` takes the next step (a list of objects, watch events, or an exception)."""

    can_watch = True

    def __init__(self, lists: list[list[dict[str, Any]]],
                 watches: list[list[dict[str, Any]] | Exception]) -> None:
        self.lists = lists
        self.watches = watches
        self.idle = threading.Event()

    def list_pages(self, res: Any, *, label_selector: str | None = None
                   ) -> Iterator[dict[str, Any]]:
        items = self.lists.pop(0)
        yield {"metadata": {"resourceVersion": str(10 * (3 - len(self.lists)))}, "items": items}

    def watch(self, res: Any, namespace: str | None = None, *, resource_version: str,
              label_selector: str | None = None, timeout_seconds: int = 300
              ) -> Iterator[dict[str, Any]]:
        if not self.watches:
            self.idle.set()
            time.sleep(5)
            return
        step = self.watches.pop(0)
        if isinstance(step, Exception):
            raise step
        yield from step


def test_an_informer_reports_resets_and_journals_watch_events_and_relist_changes() -> None:
    kube = ScriptedKube(
        lists=[[pod("a", 1), pod("b", 2)], [pod("a", 1), pod("c", 25)]],
        watches=[[{"type": "MODIFIED", "object": pod("b", 5)},
                  {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "6"}}}],
                 TemporaryError("connection reset", 1),
                 [],
                 ApiError(410, "Expired", "too old resource version")])
    resets: list[str] = []
    informer = Informer(kube, CacheSpec(resources.PODS, LABEL, LABEL),  # type: ignore[arg-type]
                        on_reset=lambda source: resets.append(source.name))
    informer.start()
    try:
        assert kube.idle.wait(10)
    finally:
        informer.stop()
    # The first watch had events and the second lost its connection: a reflector resumes
    # both from its last version. The third ended at once with nothing (a reflector lists
    # again), the fourth was refused as too old.
    assert resets == ["pods", "pods"]
    changed, _ = informer.journal.since(0.0)
    # the first list is no change; b's watch event, then what the re-list changed: c is
    # new and b is gone (its last state); a is as it was
    assert [(c.operation, c.obj["metadata"]["name"], c.obj["metadata"]["resourceVersion"])
            for c in changed] == [("add", "c", "25"), ("delete", "b", "5")]
    assert [o["metadata"]["name"] for o in informer.store.values()] == ["a", "c"]


def test_a_quiet_watch_that_lasts_is_no_reset() -> None:
    kube = ScriptedKube(lists=[[pod("a", 1)]],
                        watches=[[{"type": "MODIFIED", "object": pod("a", 5)}], []])
    resets: list[str] = []
    informer = Informer(kube, CacheSpec(resources.PODS, LABEL, LABEL),  # type: ignore[arg-type]
                        on_reset=lambda source: resets.append(source.name))
    informer.short_watch_seconds = 0.0   # the empty watch "lasted" long enough
    informer.start()
    try:
        assert kube.idle.wait(10)
    finally:
        informer.stop()
    assert resets == []
    assert [c.obj["metadata"]["resourceVersion"]
            for c in informer.journal.since(0.0)[0]] == ["5"]

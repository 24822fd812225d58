"""The full garbage collections a function runs itself: when quiet, or after a long busy while."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from functions.runtime.collector import OLDEST_THRESHOLD, Collector


@dataclass
class RecordingGc:
    """A stand-in for :mod:`gc`: young collections made by the test, collections counted."""

    young: int = 0
    threshold: tuple[int, int, int] = (700, 10, 10)
    collected: list[int] = field(default_factory=list)

    def get_threshold(self) -> tuple[int, int, int]:
        return self.threshold

    def set_threshold(self, threshold0: int, threshold1: int = 10, threshold2: int = 10,
                      /) -> None:
        self.threshold = (threshold0, threshold1, threshold2)

    def get_stats(self) -> list[dict[str, int]]:
        return [{"collections": self.young}, {"collections": 0}, {"collections": 0}]

    def collect(self, generation: int = 2) -> int:
        self.collected.append(generation)
        return 0


@dataclass
class Clock:
    now: float = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("young", "quiet", "busy_for", "runs"), [
    pytest.param(25, True, 0.0, True, id="quiet-after-making-objects"),
    pytest.param(5, True, 0.0, False, id="quiet-with-little-made"),
    pytest.param(25, False, 60.0, False, id="busy-for-a-minute"),
    pytest.param(25, False, 300.0, True, id="busy-past-the-longest-wait"),
    pytest.param(5, False, 600.0, False, id="busy-but-making-nothing"),
])
def test_a_full_collection_runs_when_quiet_or_after_the_longest_wait(
        young: int, quiet: bool, busy_for: float, runs: bool) -> None:
    fake, clock = RecordingGc(), Clock()
    collector = Collector(lambda: quiet, min_young=20, longest_seconds=300.0,
                          collector=fake, clock=clock)
    fake.young += young
    clock.now += busy_for
    assert collector.step() is runs
    assert fake.collected == ([2] if runs else [])
    # the next one counts from this one
    assert collector.step() is False


def test_start_leaves_the_full_collections_to_the_collector() -> None:
    fake = RecordingGc(threshold=(900, 15, 10))
    collector = Collector(lambda: True, collector=fake, check_seconds=3600)
    collector.start()
    collector.stop()
    assert fake.threshold == (900, 15, OLDEST_THRESHOLD)


class Node:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.other: Any = self


@pytest.fixture
def thresholds() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


@pytest.mark.usefixtures("thresholds")
def test_cyclic_garbage_waits_for_a_quiet_moment_and_is_then_freed() -> None:
    quiet = False
    collector = Collector(lambda: quiet, min_young=1, collector=gc, check_seconds=3600)
    collector.start()
    collector.stop()
    node = Node()
    gone = weakref.ref(node)
    gc.collect(1)
    gc.collect(1)   # it survived into the oldest generation, which only a full one collects
    del node
    junk = [[index] for index in range(50_000)]   # young and middle collections run
    del junk
    gc.collect(1)
    assert gone() is not None, "a full collection ran while the function was busy"
    quiet = True
    assert collector.step()
    assert gone() is None

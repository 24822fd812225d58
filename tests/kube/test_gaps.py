"""Catching up after a watch gap (:mod:`functions.kube.gaps`): what the journal keeps and
answers, when a reset or a sweep hands it over, and how far the delivery lag holds it back
(the informer's side: tests/kube/test_gaps_informer.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from functions.kube.gaps import (
    CATCH_UP_AFTER,
    DEFERRED_RETRY_SECONDS,
    JOURNAL_SECONDS,
    LAG_LIMIT_SECONDS,
    LOOKBACK_SECONDS,
    SWEEP_DEFER_SECONDS,
    SWEEP_HOLD_SECONDS,
    SWEEP_SECONDS,
    CatchUp,
    Change,
    DeliveryLag,
    Journal,
    Journaled,
    reference,
    status_only,
    true_conditions,
)

LABEL = "training.kubeflow.org/job-name"


def pod(name: str, version: int, job: str = "j", **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": str(version),
                         "labels": {LABEL: job}, **extra},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}


class Clock:
    """A clock the test moves. Shared by a :class:`CatchUp` and the journals it reads, it
    decides which hand-overs are due and what each covers, however late the catch-up thread
    runs (that thread waits at most a hand-over's distance in real seconds before it reads the
    clock again)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def names(changes: list[Change]) -> list[str]:
    return [c.obj["metadata"]["name"] for c in changes]


def added(*objs: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [("ADDED", obj) for obj in objs]


def test_a_reference_keeps_what_names_an_object_and_its_parent() -> None:
    owner = [{"kind": "PyTorchJob", "name": "j", "controller": True}]
    kept = reference(pod("p", 3, ownerReferences=owner, managedFields=[{"manager": "m"}],
                         annotations={"big": "x" * 1000}))
    assert kept == {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "p", "namespace": "ns", "resourceVersion": "3",
                                 "labels": {LABEL: "j"}, "ownerReferences": owner}}


def test_the_journal_answers_the_latest_change_of_each_object_changed_since() -> None:
    clock = Clock()
    journal = Journal(clock=clock)
    journal.record(added(pod("a", 1), pod("b", 2)))
    clock.now = 110.0
    journal.record([("MODIFIED", pod("a", 3)), ("BOOKMARK", pod("x", 3))])
    clock.now = 120.0
    journal.record([("DELETED", pod("c", 4))])
    clock.now = 121.0       # an answer reaches up to now, not including it
    changed, upto = journal.since(105.0)
    assert [(c.operation, c.obj["metadata"]["name"], c.obj["metadata"]["resourceVersion"])
            for c in changed] == [("update", "a", "3"), ("delete", "c", "4")]
    assert upto == 121.0
    assert names(journal.since(0.0)[0]) == ["b", "a", "c"]
    assert journal.since(121.0)[0] == []
    # what changed in the last ``hold`` seconds is left for the next answer
    changed, upto = journal.since(105.0, hold=5.0)
    assert names(changed) == ["a"]
    assert upto == 116.0
    assert names(journal.since(upto)[0]) == ["c"]


@pytest.mark.parametrize(("keep_seconds", "limit", "left"), [
    pytest.param(15.0, 100, ["b", "c"], id="by-age"),
    pytest.param(1000.0, 1, ["c"], id="by-count"),
])
def test_the_journal_forgets(keep_seconds: float, limit: int, left: list[str]) -> None:
    clock = Clock()
    journal = Journal(keep_seconds, limit, clock=clock)
    for step, name in enumerate(("a", "b", "c")):
        clock.now = 100.0 + 10 * step
        journal.record(added(pod(name, step)))
    clock.now += 1
    assert names(journal.since(0.0)[0]) == left


class Source:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = "pods"
        self.journal = Journal(clock=clock)


class Deliveries:
    def __init__(self) -> None:
        self.got: list[list[str]] = []
        self.changed = threading.Condition()

    def __call__(self, source: Journaled, changed: list[Change]) -> None:
        with self.changed:
            self.got.append(names(changed))
            self.changed.notify_all()

    def wait(self, count: int, timeout: float = 10.0) -> list[list[str]]:
        with self.changed:
            self.changed.wait_for(lambda: len(self.got) >= count, timeout)
            return list(self.got)


@pytest.fixture
def deliveries() -> Deliveries:
    return Deliveries()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def catch_up(deliveries: Deliveries) -> Iterator[Callable[..., CatchUp]]:
    """Makes a :class:`CatchUp` handing over to ``deliveries``; every one made is stopped."""
    made: list[CatchUp] = []

    def make(**settings: Any) -> CatchUp:
        made.append(CatchUp(deliveries, **settings))
        return made[-1]

    yield make
    for each in made:
        each.stop()


def settled(hand_over: CatchUp, timeout: float = 10.0) -> int:
    """How many watches still have a reset's hand-overs to come, once none does or after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while hand_over.pending() and time.monotonic() < deadline:
        time.sleep(0.01)
    return hand_over.pending()


def test_a_reset_hands_over_what_changed_shortly_before_and_since_in_steps(
        deliveries: Deliveries, clock: Clock, catch_up: Callable[..., CatchUp]) -> None:
    source = Source(clock)
    source.journal.record(added(pod("before", 1)))
    hand_over = catch_up(after=(0.1, 0.4), lookback=1.0, hold=0.0, merge=0.1, clock=clock)
    hand_over.reset(source)
    source.journal.record(added(pod("during", 2)))
    clock.now = 100.2
    assert deliveries.wait(1) == [["before", "during"]]
    source.journal.record(added(pod("later", 3), pod("during", 4)))
    clock.now = 100.5
    assert deliveries.wait(2) == [["before", "during"], ["later", "during"]]
    assert settled(hand_over) == 0


def test_older_changes_and_quiet_watches_hand_over_nothing(
        deliveries: Deliveries, clock: Clock, catch_up: Callable[..., CatchUp]) -> None:
    source = Source(clock)
    source.journal.record(added(pod("long-ago", 1)))
    clock.now = 100.3
    hand_over = catch_up(after=(0.05, 0.1), lookback=0.2, hold=0.0, clock=clock)
    hand_over.reset(source)
    clock.now = 100.5
    assert settled(hand_over) == 0
    assert deliveries.got == []


def test_resets_in_a_row_merge_their_schedules(
        deliveries: Deliveries, clock: Clock, catch_up: Callable[..., CatchUp]) -> None:
    source = Source(clock)
    hand_over = catch_up(after=(0.3, 1.0), lookback=0.0, hold=0.0, merge=0.5, clock=clock)
    hand_over.reset(source)
    source.journal.record(added(pod("a", 1)))
    clock.now = 100.2
    hand_over.reset(source)    # its 0.3 s is too close to the first reset's: one hand-over
    clock.now = 100.6
    assert deliveries.wait(1) == [["a"]]
    source.journal.record(added(pod("b", 2)))
    clock.now = 101.1
    assert deliveries.wait(2) == [["a"], ["b"]]   # at 1.0 s; 1.2 s merged into it
    assert settled(hand_over) == 0
    source.journal.record(added(pod("c", 3)))
    clock.now = 102.0
    time.sleep(0.3)
    assert deliveries.got == [["a"], ["b"]]


def test_a_hand_over_holds_back_the_latest_changes(
        deliveries: Deliveries, clock: Clock, catch_up: Callable[..., CatchUp]) -> None:
    source = Source(clock)
    hand_over = catch_up(after=(0.4, 0.8), lookback=0.0, hold=0.3, merge=0.1, clock=clock)
    hand_over.reset(source)
    source.journal.record(added(pod("a", 1)))
    clock.now = 100.2
    source.journal.record(added(pod("b", 2)))   # too recent for the first hand-over
    clock.now = 100.4
    assert deliveries.wait(1) == [["a"]]
    clock.now = 100.8
    assert deliveries.wait(2) == [["a"], ["b"]]


def test_a_watched_journal_is_swept_for_changes_older_than_the_hold(
        deliveries: Deliveries, clock: Clock, catch_up: Callable[..., CatchUp]) -> None:
    """No reset: the adapter's watch alone may have ended. Each sweep hands over what changed
    since the previous one, up to the hold; a change is handed over once."""
    source = Source(clock)
    clock.now = 99.5
    source.journal.record(added(pod("before", 1)))     # before the watch: not swept
    clock.now = 100.0
    hand_over = catch_up(sweep_every=0.3, sweep_hold=0.2, clock=clock)
    hand_over.watch(source)
    hand_over.watch(source)                             # watched once
    source.journal.record(added(pod("a", 2)))
    clock.now = 100.3
    assert deliveries.wait(1) == [["a"]]
    source.journal.record(added(pod("b", 3)))
    clock.now = 100.6
    assert deliveries.wait(2) == [["a"], ["b"]]
    clock.now = 101.5
    time.sleep(0.3)
    assert deliveries.got == [["a"], ["b"]]
    assert hand_over.pending() == 0                     # no reset's hand-over is due


@pytest.mark.parametrize(("quiet_after", "defer_limit"), [
    pytest.param(0.8, 60.0, id="until-quiet"),
    pytest.param(None, 0.8, id="until-the-limit"),
])
def test_a_sweep_waits_for_its_functions_to_be_quiet(
        deliveries: Deliveries, catch_up: Callable[..., CatchUp], quiet_after: float | None,
        defer_limit: float) -> None:
    started = time.monotonic()
    source = Source()
    hand_over = catch_up(sweep_every=0.2, sweep_hold=0.0, defer_limit=defer_limit,
                         quiet=lambda: quiet_after is not None
                         and time.monotonic() - started >= quiet_after)
    hand_over.watch(source)
    source.journal.record(added(pod("a", 1)))
    assert deliveries.wait(1) == [["a"]]
    assert time.monotonic() - started >= 0.8


def test_the_journal_keeps_what_the_latest_hand_over_reaches_back_to() -> None:
    """A reset's last hand-over reaches back to shortly before the reset; a sweep that waited
    as long as it may, to where the previous one stopped (its hold with the longest delivery
    lag, its period and the wait before it)."""
    assert max(CATCH_UP_AFTER) + LOOKBACK_SECONDS < JOURNAL_SECONDS
    assert JOURNAL_SECONDS > (SWEEP_HOLD_SECONDS + LAG_LIMIT_SECONDS + SWEEP_SECONDS
                              + SWEEP_DEFER_SECONDS + DEFERRED_RETRY_SECONDS)


def test_a_sweep_every_zero_sweeps_nothing(
        deliveries: Deliveries, catch_up: Callable[..., CatchUp]) -> None:
    source = Source()
    hand_over = catch_up(sweep_every=0.0, sweep_hold=0.0)
    hand_over.watch(source)
    source.journal.record(added(pod("a", 1)))
    time.sleep(0.3)
    assert deliveries.got == []


def test_a_change_carries_when_the_journal_applied_it() -> None:
    clock = Clock()
    journal = Journal(clock=clock)
    journal.record(added(pod("a", 1)))
    clock.now = 105.0
    journal.record([("MODIFIED", pod("a", 2))])
    clock.now = 110.0
    assert [(c.obj["metadata"]["resourceVersion"], c.at) for c in journal.since(0.0)[0]] == \
        [("2", 105.0)]


def _job(**changes: Any) -> dict[str, Any]:
    job: dict[str, Any] = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                           "metadata": {"name": "j", "namespace": "ns", "resourceVersion": "1",
                                        "generation": 1, "labels": {"a": "b"}},
                           "spec": {"replicas": 1}, "status": {"conditions": []}}
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        target = job
        for part in parents:
            target = target[part]
        target[leaf] = value
    return job


@pytest.mark.parametrize(("new", "alone"), [
    pytest.param(_job(metadata__resourceVersion="2", status__conditions=[{"type": "Running"}]),
                 True, id="a-status-write"),
    pytest.param(_job(metadata__resourceVersion="2", metadata__managedFields=[{"m": 1}]),
                 True, id="managed-fields-and-version-only"),
    pytest.param(_job(spec={"replicas": 2}), False, id="the-spec"),
    pytest.param(_job(metadata__labels={"a": "c"}), False, id="a-label"),
    pytest.param(_job(metadata__deletionTimestamp="now"), False, id="a-deletion"),
    pytest.param({**_job(), "data": {}}, False, id="another-top-level-field"),
])
def test_a_change_of_the_status_alone(new: dict[str, Any], alone: bool) -> None:
    assert status_only(_job(), new) is alone
    assert status_only(None, new) is False


def test_a_reference_keeps_the_types_of_the_true_conditions() -> None:
    job = _job(status__conditions=[{"type": "Created", "status": "True"},
                                   {"type": "Running", "status": "False"}, "junk"])
    kept = reference(job)
    assert kept["status"] == {"conditions": [{"type": "Created", "status": "True"}]}
    assert true_conditions(kept) == {"Created"}
    assert "status" not in reference(_job())
    assert true_conditions(reference(_job())) == set()


def test_the_journal_marks_changes_of_the_status_alone() -> None:
    journal = Journal()
    journal.record([("MODIFIED", pod("a", 1))], status_only=True)
    journal.record([("MODIFIED", pod("b", 2))])
    assert [(c.obj["metadata"]["name"], c.status_only) for c in journal.since(0.0)[0]] == \
        [("a", True), ("b", False)]


@pytest.mark.parametrize(("alone", "latest_alone"), [
    pytest.param((True, True), True, id="status-writes-only"),
    pytest.param((False, True), False, id="a-status-write-after-another-change"),
    pytest.param((True, False), False, id="another-change-after-a-status-write"),
])
def test_the_latest_change_is_of_the_status_alone_only_if_every_change_in_the_span_was(
        alone: tuple[bool, bool], latest_alone: bool) -> None:
    clock = Clock()
    journal = Journal(clock=clock)
    for step, status_alone in enumerate(alone):
        clock.now = 100.0 + step
        journal.record([("MODIFIED", pod("a", step + 1))], status_only=status_alone)
    clock.now = 110.0
    [change] = journal.since(0.0)[0]
    assert (change.obj["metadata"]["resourceVersion"], change.status_only) == \
        ("2", latest_alone)
    # a span that starts after the other change holds only the status write
    assert [c.status_only for c in journal.since(101.0)[0]] == [alone[1]]


@pytest.mark.parametrize(("observed", "lag"), [
    pytest.param([], 0.0, id="none-yet"),
    pytest.param([(130.0, 5.0), (150.0, 2.0)], 5.0, id="the-longest-in-the-window"),
    pytest.param([(100.0, 5.0), (150.0, 2.0), (170.0, 3.0)], 3.0, id="older-ones-age-out"),
    pytest.param([(160.0, -4.0)], 0.0, id="a-clock-ahead-is-no-lag"),
    pytest.param([(160.0, 1e6)], 240.0, id="at-most-the-limit"),
])
def test_the_delivery_lag_is_the_longest_delay_of_the_window(
        clock: Clock, observed: list[tuple[float, float]], lag: float) -> None:
    delays = DeliveryLag(window=60.0, limit=240.0, clock=clock)
    for at, seconds in observed:
        clock.now = at
        delays.observe(seconds)
    clock.now = 170.0
    assert delays.recent() == lag


@pytest.mark.parametrize("kind", ["reset", "sweep"])
def test_a_hand_over_holds_back_the_delivery_lag_too(
        deliveries: Deliveries, clock: Clock, catch_up: Callable[..., CatchUp],
        kind: str) -> None:
    """Under a burst the events come long after the watch saw their changes: a change is
    handed over only once its event, as late as the recent ones, should have come."""
    source = Source(clock)
    hand_over = catch_up(after=(0.3, 0.6, 1.0), lookback=0.0, hold=0.1, merge=0.1,
                         sweep_every=0.3, sweep_hold=0.1, lag=lambda: 0.5, clock=clock)
    if kind == "reset":
        hand_over.reset(source)
    else:
        hand_over.watch(source)
    source.journal.record(added(pod("a", 1)))
    clock.now = 100.3                                  # a is 0.3 s old: its event may come
    clock.now = 100.6
    time.sleep(0.3)
    assert deliveries.got == []
    clock.now = 101.0                                  # 1.0 s old: past hold and lag
    assert deliveries.wait(1) == [["a"]]

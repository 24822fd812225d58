"""The watch cache's store: what it keeps from the watch and from write answers, that nothing
stale or deleted comes back, and when it has caught up with an event. Informers against a
real API server are tested in test_cache_cluster.py."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from functions.kube.store import Store, version_of

LABEL = "training.kubeflow.org/job-name"


def pod(name: str, version: int | str, job: str = "j", namespace: str = "ns",
        **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace,
                            "resourceVersion": str(version), "labels": {LABEL: job}}
    meta.update(extra)
    return {"metadata": meta}


def store() -> Store:
    return Store("v1", "Pod", LABEL)


def versions(s: Store, name: str = "p") -> int | None:
    found = s.get("ns", name)
    return version_of(found) if found is not None else None


def test_list_fills_in_kind_indexes_by_label_and_drops_managed_fields() -> None:
    s = store()
    s.replace([pod("a", 5, managedFields=[{"manager": "x"}]), pod("b", 6, job="k")], "10")
    a = s.get("ns", "a")
    assert a is not None and (a["apiVersion"], a["kind"]) == ("v1", "Pod")
    assert "managedFields" not in a["metadata"]
    assert [p["metadata"]["name"] for p in s.by_label("ns", "j")] == ["a"]
    assert s.by_label("other", "j") == []
    assert s.high_water == 10


def test_relabelled_object_moves_between_index_buckets() -> None:
    s = store()
    s.apply("ADDED", pod("p", 1, job="j"))
    s.apply("MODIFIED", pod("p", 2, job="k"))
    assert s.by_label("ns", "j") == []
    assert len(s.by_label("ns", "k")) == 1


@pytest.mark.parametrize(("steps", "expected"), [
    pytest.param([("watch", "ADDED", 5), ("offer", "", 7)], 7, id="newer-offer-kept"),
    pytest.param([("watch", "ADDED", 7), ("offer", "", 5)], 7, id="older-offer-ignored"),
    pytest.param([("offer", "", 9), ("watch", "MODIFIED", 8)], 9,
                 id="watch-behind-an-offer-does-not-roll-back"),
    pytest.param([("watch", "ADDED", 5), ("watch", "DELETED", 6), ("offer", "", 5)], None,
                 id="stale-event-does-not-resurrect"),
    pytest.param([("watch", "ADDED", 5), ("watch", "DELETED", 6), ("offer", "", 8)], 8,
                 id="re-created-after-delete"),
    pytest.param([("watch", "BOOKMARK", 20), ("offer", "", 15)], None,
                 id="unknown-object-older-than-the-watch-is-ignored"),
    pytest.param([("watch", "BOOKMARK", 20), ("offer", "", 25)], 25,
                 id="unknown-object-ahead-of-the-watch-is-kept"),
    pytest.param([("watch", "ADDED", 5), ("deleted", "", 9), ("offer", "", 7)], None,
                 id="deletion-learnt-early-blocks-older-offers"),
    pytest.param([("watch", "ADDED", 5), ("deleted", "", 9), ("watch", "MODIFIED", 7)], 7,
                 id="the-watch-itself-is-always-applied"),
    pytest.param([("offer", "", 12), ("deleted", "", 9)], 12,
                 id="deletion-older-than-a-re-creation-is-ignored"),
    pytest.param([("watch", "ADDED", 5), ("watch", "DELETED", 4)], 5,
                 id="watch-delete-older-than-held-keeps-it"),
])
def test_versions_decide(steps: list[tuple[str, str, int]], expected: int | None) -> None:
    s = store()
    for source, event, version in steps:
        if source == "watch":
            s.apply(event, pod("p", version))
        elif source == "offer":
            s.offer(pod("p", version))
        else:
            s.offer_deleted(pod("p", version))
    assert versions(s) == expected


def test_objects_without_integer_versions_are_only_taken_from_the_watch() -> None:
    s = store()
    assert not s.offer(pod("p", "abc"))
    assert not s.offer_deleted(pod("p", "abc"))
    s.apply("ADDED", pod("p", "abc"))
    assert s.get("ns", "p") is not None


def test_tombstones_are_forgotten_once_the_watch_passes_them() -> None:
    s = store()
    s.apply("ADDED", pod("p", 5))
    s.offer_deleted(pod("p", 9))
    assert s.get("ns", "p") is None
    s.apply("BOOKMARK", {"metadata": {"resourceVersion": "10"}})
    assert s._gone == {}
    assert not s.offer(pod("p", 8))    # older than the watch: still refused
    assert s.offer(pod("p", 11))


def test_a_list_replaces_everything() -> None:
    s = store()
    s.apply("ADDED", pod("gone", 3))
    s.offer_deleted(pod("p", 30))
    s.replace([pod("kept", 40)], "41")
    assert s.get("ns", "gone") is None
    assert s.get("ns", "kept") is not None
    assert s.by_label("ns", "j") == [s.get("ns", "kept")]
    assert s._gone == {}


def test_a_list_answers_what_it_changed() -> None:
    s = store()
    s.replace([pod("same", 1), pod("moved", 2), pod("gone", 3)], "10")
    changed = s.replace([pod("same", 1), pod("moved", 12), pod("new", 13)], "20")
    assert [(kind, o["metadata"]["name"], version_of(o)) for kind, o in changed] == [
        ("MODIFIED", "moved", 12), ("ADDED", "new", 13), ("DELETED", "gone", 3)]
    assert s.replace([pod("same", 1), pod("moved", 12), pod("new", 13)], "21") == []


@pytest.mark.parametrize(("held", "high_water", "event_version", "expected"), [
    pytest.param(7, 0, 7, True, id="holds-that-version"),
    pytest.param(9, 0, 7, True, id="holds-a-newer-one"),
    pytest.param(5, 0, 7, False, id="holds-an-older-one"),
    pytest.param(None, 10, 7, True, id="not-held-and-the-watch-is-past-it"),
    pytest.param(None, 5, 7, False, id="not-held-and-the-watch-is-behind"),
])
def test_caught_up(held: int | None, high_water: int, event_version: int,
                   expected: bool) -> None:
    s = store()
    if held is not None:
        s.apply("ADDED", pod("p", held))
    s.apply("BOOKMARK", {"metadata": {"resourceVersion": str(high_water)}})
    assert s.caught_up(pod("p", event_version)) is expected


def test_caught_up_waits_for_the_watch() -> None:
    s = store()
    s.apply("ADDED", pod("p", 5))
    timer = threading.Timer(0.05, s.apply, args=("MODIFIED", pod("p", 8)))
    timer.start()
    assert s.caught_up(pod("p", 8), timeout=5)
    timer.join()
    assert not s.caught_up(pod("p", 9), timeout=0.05)


def test_reached_waits_only_for_a_moving_watch() -> None:
    s = store()
    s.apply("ADDED", pod("p", 5))
    assert s.reached(5) and not s.reached(6)
    timer = threading.Timer(0.05, s.apply, args=("MODIFIED", pod("q", 9)))
    timer.start()
    assert s.reached(8, timeout=5)               # moving: waited for
    timer.join()
    s.last_change -= 2                           # idle for two seconds
    started = time.monotonic()
    assert not s.reached(10, timeout=5)
    assert time.monotonic() - started < 1        # idle: not waited for


def test_spec_writers_through_another_version_survive_the_trim() -> None:
    """An MPIJob written through ``kubeflow.org/v1`` and cached through ``v2beta1`` keeps who
    wrote its spec through which version (its flavour); the field sets themselves go."""
    s = Store("kubeflow.org/v2beta1", "MPIJob")
    spec: dict[str, Any] = {"f:spec": {"f:mpiReplicaSpecs": {}}, "f:metadata": {}}
    job = {"metadata": {"name": "pi", "namespace": "ns", "resourceVersion": "3",
                        "managedFields": [
                            {"manager": "sdk", "operation": "Update", "time": "t1",
                             "apiVersion": "kubeflow.org/v1", "fieldsV1": spec},
                            {"manager": "status", "operation": "Apply", "time": "t2",
                             "apiVersion": "kubeflow.org/v2beta1",
                             "fieldsV1": {"f:status": {}}}]}}
    s.apply("ADDED", job)
    found = s.get("ns", "pi")
    assert found is not None
    assert found["metadata"]["managedFields"] == [
        {"apiVersion": "kubeflow.org/v1", "manager": "sdk", "operation": "Update", "time": "t1",
         "fieldsV1": {"f:spec": {}}},
        {"apiVersion": "kubeflow.org/v2beta1", "manager": "status", "operation": "Apply",
         "time": "t2"}]
    same = {"metadata": {"name": "v2", "namespace": "ns", "resourceVersion": "4",
                         "managedFields": [{"manager": "kubectl", "fieldsV1": spec,
                                            "apiVersion": "kubeflow.org/v2beta1"}]}}
    s.apply("ADDED", same)
    kept = s.get("ns", "v2")
    assert kept is not None and "managedFields" not in kept["metadata"]


@pytest.mark.parametrize("take", [
    pytest.param(lambda s, obj: s.replace([obj], "10"), id="list"),
    pytest.param(lambda s, obj: s.apply("ADDED", obj), id="watch"),
    pytest.param(lambda s, obj: s.offer(obj), id="write-answer"),
])
def test_the_store_keeps_what_its_keep_says_of_everything_it_takes(take: Any) -> None:
    s = Store("v1", "Pod", LABEL, keep=lambda obj: {**obj, "spec": {}})
    take(s, {**pod("p", 5), "spec": {"volumes": [{"name": "v"}]}})
    found = s.get("ns", "p")
    assert found is not None and found["spec"] == {} and s.by_label("ns", "j") == [found]

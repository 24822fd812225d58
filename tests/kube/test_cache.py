"""What an informer makes of its watch without an API server: which change touched an
object's status alone (the watch itself runs against a real one in test_cache_cluster.py)."""

from __future__ import annotations

from typing import Any

import pytest

from functions.kube import resources
from functions.kube.cache import CacheSpec, Informer
from tests.runtime.test_app import refusing_kube

Delivery = tuple[str, dict[str, Any]]


def job(version: int, *, replicas: int = 1, running: bool = False,
        label: str = "a") -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "a", "namespace": "ns", "resourceVersion": str(version),
                     "labels": {"l": label}, "managedFields": [{"manager": str(version)}]},
        "spec": {"replicas": replicas}}
    if running:
        obj["status"] = {"conditions": [{"type": "Running", "status": "True"}]}
    return obj


def informer(status_changes: bool = True) -> Informer:
    return Informer(refusing_kube(None), CacheSpec(resources.PYTORCHJOBS,
                                                   status_changes=status_changes))


@pytest.mark.parametrize(("deliveries", "asked", "alone"), [
    pytest.param([("ADDED", job(1)), ("MODIFIED", job(2, running=True))], job(2), True,
                 id="a-status-write"),
    pytest.param([("ADDED", job(1)), ("MODIFIED", job(2, replicas=2))], job(2), False,
                 id="a-spec-change"),
    pytest.param([("ADDED", job(1)), ("MODIFIED", job(2, label="b"))], job(2), False,
                 id="a-label-change"),
    pytest.param([("ADDED", job(1))], job(1), False, id="a-creation"),
    pytest.param([("ADDED", job(1)), ("MODIFIED", job(2, running=True))], job(1), False,
                 id="an-earlier-version"),
    pytest.param([("ADDED", job(1)), ("MODIFIED", job(2, running=True)),
                  ("MODIFIED", job(3, replicas=2))], job(2), False,
                 id="the-watch-has-moved-on"),
    pytest.param([("ADDED", job(1)), ("MODIFIED", job(2, running=True)),
                  ("DELETED", job(3, running=True))], job(2), False, id="deleted-since"),
    pytest.param([("MODIFIED", job(2, running=True))], job(2), False,
                 id="nothing-delivered-before"),
    pytest.param([("ADDED", job(2)), ("MODIFIED", job(1, running=True))], job(1), False,
                 id="an-older-version-after-a-newer-one"),
])
def test_the_watch_tells_a_change_of_the_status_alone(deliveries: list[Delivery],
                                                      asked: dict[str, Any],
                                                      alone: bool) -> None:
    watched = informer()
    for kind, obj in deliveries:
        watched._delivery(kind, obj)
    assert watched.status_alone(asked) is alone


def test_the_changes_before_a_list_are_not_known() -> None:
    class Lister:
        def list_pages(self, res: Any, label_selector: Any) -> list[dict[str, Any]]:
            listed = {k: v for k, v in job(2, running=True).items()
                      if k not in ("apiVersion", "kind")}
            return [{"metadata": {"resourceVersion": "2"}, "items": [listed]}]

    watched = informer()
    watched._delivery("ADDED", job(1))
    watched.kube = Lister()  # type: ignore[assignment]
    watched._list()
    assert watched.status_alone(job(2, running=True)) is False
    # after the list, the watch compares with what the list delivered (kind and all)
    assert watched._delivery("MODIFIED", job(3)) is True
    assert watched.status_alone(job(3)) is True


def test_only_an_informer_asked_to_tells_status_changes() -> None:
    watched = informer(status_changes=False)
    for kind, obj in [("ADDED", job(1)), ("MODIFIED", job(2, running=True))]:
        watched._delivery(kind, obj)
    assert watched.status_alone(job(2)) is False

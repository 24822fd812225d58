"""The watch cache against a real API server: it syncs, follows the watch across the server
ending it, shows this process's own writes at once, and reads through when it cannot answer."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from devstack.cluster.runner import LocalCluster
from functions.kube import resources
from functions.kube.cache import CachedReader, CacheSpec, Informer, ObjectCache
from functions.kube.client import KubeClient
from tests.support import wait_for

LABEL = "training.kubeflow.org/job-name"


def config_map(name: str, namespace: str, job: str | None = "j") -> dict[str, Any]:
    labels = {LABEL: job} if job else {}
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "data": {"k": "v"}}


@pytest.fixture
def cached(cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[
        tuple[KubeClient, ObjectCache, CachedReader]]:
    # The server ends each watch after a second, so every test also crosses watch restarts.
    monkeypatch.setattr(Informer, "watch_seconds", 1)
    kube = cluster.client()
    cache = ObjectCache(kube, [CacheSpec(resources.CONFIGMAPS, LABEL, LABEL)])
    reader = CachedReader(kube, cache)
    assert cache.wait_synced([resources.CONFIGMAPS], 10)
    yield kube, cache, reader
    cache.stop()


def names(objs: list[dict[str, Any]]) -> list[str]:
    return sorted(o["metadata"]["name"] for o in objs)


def test_own_writes_show_at_once_and_others_through_the_watch(
        cached: tuple[KubeClient, ObjectCache, CachedReader], kube: KubeClient,
        namespace: str) -> None:
    own, _, reader = cached
    selector = f"{LABEL}=j"
    own.create(config_map("mine", namespace))
    before = own.request_count()
    assert names(reader.list(resources.CONFIGMAPS, namespace, label_selector=selector)) == [
        "mine"]
    assert own.request_count() == before          # answered by the cache
    kube.create(config_map("theirs", namespace))  # another client: only the watch tells
    wait_for(lambda: len(reader.list(resources.CONFIGMAPS, namespace,
                                     label_selector=selector)) == 2, 10, message="watch")
    kube.delete(resources.CONFIGMAPS, "theirs", namespace)
    wait_for(lambda: names(reader.list(resources.CONFIGMAPS, namespace,
                                       label_selector=selector)) == ["mine"], 10,
             message="deletion through the watch")


def test_the_watch_is_followed_across_restarts(
        cached: tuple[KubeClient, ObjectCache, CachedReader], kube: KubeClient,
        namespace: str) -> None:
    _, _, reader = cached
    kube.create(config_map("cm", namespace))
    for value in ("1", "2", "3"):
        time.sleep(1.2)                            # past the end of the current watch
        kube.patch(resources.CONFIGMAPS, "cm", {"data": {"k": value}}, namespace)

        def current(expected: str = value) -> bool:
            found = reader.get(resources.CONFIGMAPS, "cm", namespace) or {}
            return bool(found.get("data", {}).get("k") == expected)
        wait_for(current, 10, message=f"value {value}")


def test_reads_the_cache_cannot_answer_go_to_the_api_server(
        cached: tuple[KubeClient, ObjectCache, CachedReader], kube: KubeClient,
        namespace: str) -> None:
    own, _, reader = cached
    kube.create(config_map("unlabelled", namespace, job=None))
    before = own.request_count()
    # Not held (outside the selector): a get misses the cache and reads the API server.
    assert reader.get(resources.CONFIGMAPS, "unlabelled", namespace) is not None
    # A selector the cache does not index, and a resource it does not hold.
    assert names(reader.list(resources.CONFIGMAPS, namespace, label_selector="other=x")) == []
    assert reader.list(resources.SECRETS, namespace) is not None
    assert own.request_count() == before + 3

"""The Lease mutex against the real API server: one holder at a time, takeover on expiry,
renewal while held, nothing acquired where nothing can be held."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from functions.kube import resources
from functions.kube.client import KubeClient
from functions.runtime import lease


def test_one_holder_at_a_time(kube: KubeClient, namespace: str) -> None:
    assert lease.try_acquire(kube, "queue", namespace=namespace, holder="a")
    assert not lease.try_acquire(kube, "queue", namespace=namespace, holder="b")
    assert lease.try_acquire(kube, "queue", namespace=namespace, holder="a"), "renewal"
    lease.release(kube, "queue", namespace=namespace, holder="b")  # not b's: no effect
    assert not lease.try_acquire(kube, "queue", namespace=namespace, holder="b")
    lease.release(kube, "queue", namespace=namespace, holder="a")
    assert lease.try_acquire(kube, "queue", namespace=namespace, holder="b")
    current = kube.get(resources.LEASES, "queue", namespace)
    assert current is not None
    assert current["spec"]["holderIdentity"] == "b"


def test_expired_holder_is_replaced(kube: KubeClient, namespace: str) -> None:
    past = datetime.now(UTC) - timedelta(minutes=5)
    assert lease.try_acquire(kube, "queue", namespace=namespace, holder="dead",
                             duration_seconds=30, now=past)
    assert lease.try_acquire(kube, "queue", namespace=namespace, holder="alive")


def test_held_releases_on_exit(kube: KubeClient, namespace: str) -> None:
    with lease.held(kube, "queue", namespace=namespace, holder="a") as mine:
        assert mine
        with lease.held(kube, "queue", namespace=namespace, holder="b") as theirs:
            assert not theirs
    with lease.held(kube, "queue", namespace=namespace, holder="b") as now_theirs:
        assert now_theirs


def test_missing_namespace_is_not_acquired(kube: KubeClient) -> None:
    assert not lease.try_acquire(kube, "queue", namespace="no-such-namespace", holder="a")
    with lease.held(kube, "queue", namespace="no-such-namespace", holder="a") as mine:
        assert not mine
        assert not mine.valid()


def test_held_lease_outlives_its_duration_by_renewal(kube: KubeClient, namespace: str) -> None:
    with lease.held(kube, "queue", namespace=namespace, holder="a",
                    duration_seconds=1) as mine:
        time.sleep(2.5)
        assert mine.valid()
        assert mine.renewals >= 5
        assert not lease.try_acquire(kube, "queue", namespace=namespace, holder="b")
        current = kube.get(resources.LEASES, "queue", namespace)
        assert current is not None
        spec = current["spec"]
        assert spec["holderIdentity"] == "a"
        assert spec["renewTime"] > spec["acquireTime"]

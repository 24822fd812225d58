"""The cache profile's heap measure: everything reachable counted, what is shared once."""

from __future__ import annotations

import sys

import pytest

from bench.cache_memory import heap_bytes

SHARED = {"image": "quay.io/x", "ports": [1, 2]}


@pytest.mark.parametrize(("objects", "expected"), [
    pytest.param([[]], sys.getsizeof([]), id="an-empty-list"),
    pytest.param([SHARED], sys.getsizeof(SHARED) + sum(sys.getsizeof(x) for x in (
        "image", "quay.io/x", "ports", SHARED["ports"], 1, 2)), id="nested"),
    pytest.param([SHARED, SHARED], heap_bytes([SHARED]), id="shared-once"),
])
def test_heap_bytes(objects: list[object], expected: int) -> None:
    assert heap_bytes(objects) == expected


def test_a_shared_subtree_costs_its_holders_only_their_own_size() -> None:
    holders = [{"spec": SHARED}, {"spec": SHARED}]
    alone = heap_bytes([SHARED])
    assert heap_bytes(holders) == alone + sum(sys.getsizeof(h) for h in holders) + \
        sys.getsizeof("spec")

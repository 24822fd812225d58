"""Reading a child's role and replica index from the labels the controllers set."""

from __future__ import annotations

from typing import Any

import pytest

from functions.jobs.core.frameworks import LABEL_JOB_ROLE, LABEL_REPLICA_INDEX
from functions.jobs.core.pods import index_of, role_of


def labelled(**labels: str) -> dict[str, Any]:
    return {"metadata": {"labels": labels}}


@pytest.mark.parametrize(("obj", "role"), [
    pytest.param(labelled(**{LABEL_JOB_ROLE: "launcher"}), "launcher", id="launcher"),
    pytest.param(labelled(**{LABEL_JOB_ROLE: "worker"}), "worker", id="worker"),
    pytest.param(labelled(), "", id="no-label"),
    pytest.param({}, "", id="no-metadata"),
])
def test_role_of(obj: dict[str, Any], role: str) -> None:
    assert role_of(obj) == role


@pytest.mark.parametrize(("obj", "index"), [
    pytest.param(labelled(**{LABEL_REPLICA_INDEX: "3"}), 3, id="number"),
    pytest.param(labelled(**{LABEL_REPLICA_INDEX: "three"}), None, id="not-a-number"),
    pytest.param(labelled(), None, id="no-label"),
])
def test_index_of(obj: dict[str, Any], index: int | None) -> None:
    assert index_of(obj) == index

"""The pure rules of wakes: the minute a due time is met at, the PingSource that fires then,
and which wakes cover a due time or have fired."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from functions.core import wakes

NOW = datetime(2026, 12, 6, 12, 3, 20, tzinfo=UTC)


def at(hour: int, minute: int, second: int = 0) -> datetime:
    return datetime(2026, 12, 6, hour, minute, second, tzinfo=UTC)


@pytest.mark.parametrize(("due", "minute"), [
    pytest.param(at(12, 3, 20), at(12, 4), id="rounded-up"),
    pytest.param(at(12, 4), at(12, 4), id="on-the-minute"),
    pytest.param(datetime(2026, 12, 6, 12, 4, 0, 1, tzinfo=UTC), at(12, 5), id="just-after"),
    pytest.param(datetime(2026, 12, 31, 23, 59, 30, tzinfo=UTC),
                 datetime(2027, 1, 1, tzinfo=UTC), id="across-the-year"),
])
def test_a_due_time_is_met_at_the_next_minute_boundary(due: datetime,
                                                       minute: datetime) -> None:
    assert wakes.wake_minute(due) == minute


def test_a_wake_source_fires_once_at_its_minute_for_its_function_alone() -> None:
    source = wakes.wake_source("status", at(12, 4), "opendatahub", "odh-training")
    assert source["metadata"]["name"] == "odh-training-wake-status-202612061204"
    assert source["metadata"]["labels"][wakes.FUNCTION_LABEL] == "status"
    spec = source["spec"]
    assert (spec["schedule"], spec["timezone"]) == ("4 12 6 12 *", "UTC")
    assert spec["ceOverrides"]["extensions"] == {wakes.EXTENSION: "status"}
    assert spec["sink"]["ref"] == {"apiVersion": "eventing.knative.dev/v1", "kind": "Broker",
                                   "name": "odh-training"}
    assert json.loads(spec["data"])["due"] == "2026-12-06T12:04:00Z"
    assert wakes.minute_of(source) == at(12, 4)
    assert wakes.minute_of({"metadata": {"name": "odh-training-resync"}}) is None


@pytest.mark.parametrize(("pending", "minute", "covered"), [
    pytest.param([], at(12, 10), False, id="none"),
    pytest.param([at(12, 5)], at(12, 10), True, id="an-earlier-one"),
    pytest.param([at(12, 10)], at(12, 10), True, id="the-same-minute"),
    pytest.param([at(12, 11)], at(12, 10), False, id="only-a-later-one"),
    pytest.param([at(12, 3)], at(12, 10), False, id="one-that-fired"),
])
def test_a_due_time_is_covered_by_a_wake_yet_to_fire_at_or_before_it(
        pending: list[datetime], minute: datetime, covered: bool) -> None:
    assert wakes.covered(pending, minute, NOW) is covered


def test_wakes_whose_minute_has_come_have_fired() -> None:
    assert wakes.fired([at(12, 5), at(12, 3), at(12, 1)], NOW) == [at(12, 1), at(12, 3)]

"""The chaos suites' comparison: what it keeps of an object and what it drops as history."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chaos.scenario import describe


def job(*conditions: tuple[str, str]) -> dict[str, Any]:
    return {"kind": "TFJob", "metadata": {"name": "tf"}, "spec": {},
            "status": {"conditions": [{"type": t, "status": s, "reason": f"TFJob{t}"}
                                      for t, s in conditions]}}


@pytest.mark.parametrize(("conditions", "kept"), [
    pytest.param([("Created", "True"), ("Running", "False"), ("Succeeded", "True")],
                 [("Created", "True"), ("Succeeded", "True")], id="finished-drops-running-false"),
    pytest.param([("Created", "True"), ("Running", "False"), ("Failed", "True")],
                 [("Created", "True"), ("Failed", "True")], id="failed-drops-running-false"),
    pytest.param([("Created", "True"), ("Running", "False"), ("Restarting", "True")],
                 [("Created", "True"), ("Restarting", "True"), ("Running", "False")],
                 id="unfinished-keeps-running-false"),
    pytest.param([("Created", "True"), ("Running", "True")],
                 [("Created", "True"), ("Running", "True")], id="running-kept"),
])
def test_conditions_compared(conditions: list[tuple[str, str]],
                             kept: list[tuple[str, str]]) -> None:
    assert [(t, s) for t, s, _ in describe(job(*conditions))["conditions"]] == kept

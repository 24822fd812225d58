"""How a function process is put together: its watch cache and its settings."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from functions.jobs.controller import CONTROLLERS
from functions.kube import resources
from functions.runtime.assembly import cache_specs, event_hold, sweep_seconds
from functions.runtime.registry import FunctionName


@pytest.mark.parametrize(("function", "parents", "children"), [
    pytest.param("reconcile", {"pytorchjobs", "tfjobs", "mpijobs"}, {"pods", "services"},
                 id="reconcile"),
    pytest.param("status", {"pytorchjobs", "jaxjobs"}, {"pods"}, id="status"),
    pytest.param("gc", {"pytorchjobs", "xgboostjobs"}, set(), id="gc"),
])
def test_only_the_parents_informers_tell_status_changes(function: FunctionName,
                                                       parents: set[str],
                                                       children: set[str]) -> None:
    specs = {s.resource.plural: s for s in cache_specs(CONTROLLERS, (function,))}
    assert parents <= {name for name, spec in specs.items() if spec.status_changes}
    assert children == {name for name, spec in specs.items() if not spec.status_changes}
    assert len(specs) == len({(s.resource.group, s.resource.plural)
                              for s in cache_specs(CONTROLLERS, (function,))})
    assert specs.get("pods") is None or specs["pods"].index_label is not None


@pytest.mark.parametrize(("variable", "read", "value", "expected"), [
    pytest.param("FUNCTIONS_SWEEP_SECONDS", sweep_seconds, "0", 0.0, id="sweep-off"),
    pytest.param("FUNCTIONS_SWEEP_SECONDS", sweep_seconds, None, 10.0, id="sweep-default"),
    pytest.param("FUNCTIONS_EVENT_HOLD_SECONDS", event_hold, "5", 5.0, id="hold"),
    pytest.param("FUNCTIONS_EVENT_HOLD_SECONDS", event_hold, None, 60.0, id="hold-default"),
])
def test_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch, variable: str,
                                       read: Callable[[], float], value: str | None,
                                       expected: float) -> None:
    if value is None:
        monkeypatch.delenv(variable, raising=False)
    else:
        monkeypatch.setenv(variable, value)
    assert read() == expected


def test_pods_are_cached_by_the_job_label_for_the_functions_that_read_them() -> None:
    specs = cache_specs(CONTROLLERS, ("reconcile", "status", "gc"))
    pods = [s for s in specs if s.resource == resources.PODS]
    assert len(pods) == 1
    assert pods[0].selector == pods[0].index_label == "training.kubeflow.org/job-name"

"""The fuzz strategies handle every shape they produce themselves: an operation drawn after
another left a ``null`` template, a string spec or a list of odd items sends that shape on
instead of crashing the generator (which would fail a cluster test for a reason of its own)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.strategies import JOB_OPERATIONS, SPEC_FIELDS, job_sample, job_spec, mutate_job

Obj = dict[str, Any]


def set_template(value: Any) -> Callable[[Obj], None]:
    def shape(job: Obj) -> None:
        for replica in job["spec"][SPEC_FIELDS[job["kind"]]].values():
            replica["template"] = value
    return shape


def set_pod_spec(value: Any) -> Callable[[Obj], None]:
    def shape(job: Obj) -> None:
        for replica in job["spec"][SPEC_FIELDS[job["kind"]]].values():
            replica["template"]["spec"] = value
    return shape


def set_containers(value: Any) -> Callable[[Obj], None]:
    def shape(job: Obj) -> None:
        for replica in job["spec"][SPEC_FIELDS[job["kind"]]].values():
            replica["template"]["spec"]["containers"] = value
    return shape


def set_spec_field(name: str | None, value: Any) -> Callable[[Obj], None]:
    def shape(job: Obj) -> None:
        job["spec"][name or SPEC_FIELDS[job["kind"]]] = value
    return shape


HOSTILE_SHAPES = [
    pytest.param(set_template(None), id="null-template"),
    pytest.param(set_template("text"), id="string-template"),
    pytest.param(set_pod_spec(None), id="null-pod-spec"),
    pytest.param(set_pod_spec([1, 2]), id="list-pod-spec"),
    pytest.param(set_containers("abc"), id="string-containers"),
    pytest.param(set_containers([None, 3, "x"]), id="odd-containers"),
    pytest.param(set_spec_field("runPolicy", None), id="null-run-policy"),
    pytest.param(set_spec_field("runPolicy", 7), id="number-run-policy"),
    pytest.param(set_spec_field(None, None), id="null-replica-specs"),
    pytest.param(set_spec_field(None, ["Worker"]), id="list-replica-specs"),
]


@pytest.mark.parametrize("shape", HOSTILE_SHAPES)
@pytest.mark.parametrize("operation", JOB_OPERATIONS)
@pytest.mark.parametrize("kind", ["PyTorchJob", "MPIJob"])
@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_an_operation_on_a_hostile_shape_sends_it_on(
        kind: str, operation: str, shape: Callable[[Obj], None], data: st.DataObject) -> None:
    job = job_sample(kind)
    shape(job)
    mutate_job(data.draw, job, operation)
    assert job["kind"] == kind
    assert isinstance(job["spec"], dict)


@settings(max_examples=300, deadline=None)
@given(job=job_spec())
def test_job_specs_are_always_drawn(job: Obj) -> None:
    assert job["kind"] in SPEC_FIELDS
    assert isinstance(job["spec"], dict)

"""Request validation: every bad field is named in the problem document."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from functions.api.core import problems
from functions.api.core.models import JobRequest, reserved_label

GOOD: dict[str, Any] = {"name": "mnist", "framework": "pytorch", "image": "img:1"}


def fields_of(body: dict[str, Any]) -> list[str]:
    with pytest.raises(ValidationError) as caught:
        JobRequest.model_validate(body)
    problem = problems.invalid_request(caught.value)
    assert problem.status == 422
    return [e.field for e in problem.errors]


@pytest.mark.parametrize(("change", "fields"), [
    pytest.param({"image": None}, ["image"], id="null-image"),
    pytest.param({"image": ""}, ["image"], id="empty-image"),
    pytest.param({"workers": -1}, ["workers"], id="negative-workers"),
    pytest.param({"workers": 0}, ["workers"], id="zero-workers"),
    pytest.param({"framework": "caffe"}, ["framework"], id="unknown-framework"),
    pytest.param({"name": "Bad_Name"}, ["name"], id="bad-name"),
    pytest.param({"resources": {"gpus": -2}}, ["resources.gpus"], id="negative-gpus"),
    pytest.param({"resources": {"cpu": "lots"}}, ["resources.cpu"], id="bad-quantity"),
    pytest.param({"env": {"1X": "v"}}, ["env.1X.[key]"], id="bad-env-name"),
    pytest.param({"labels": {"training.kubeflow.org/job-name": "x"}}, ["labels"],
                 id="reserved-label"),
    pytest.param({"labels": {"ok": "bad value!"}}, ["labels.ok"], id="bad-label-value"),
    pytest.param({"priority": 5000}, ["priority"], id="priority-out-of-range"),
    pytest.param({"colour": "red"}, ["colour"], id="unknown-field"),
])
def test_invalid_requests_name_the_field(change: dict[str, Any], fields: list[str]) -> None:
    assert fields_of({**GOOD, **change}) == fields


def test_missing_fields_are_each_named() -> None:
    assert fields_of({"framework": "pytorch"}) == ["name", "image"]


def test_a_valid_request_gets_defaults() -> None:
    request = JobRequest.model_validate(GOOD)
    assert (request.workers, request.priority, request.queue, request.resources.gpus) == (
        1, 0, None, 0)


@pytest.mark.parametrize(("key", "reserved"), [
    pytest.param("team", False, id="plain"),
    pytest.param("kwok.x-k8s.io/result", False, id="kwok"),
    pytest.param("kueue.x-k8s.io/queue-name", True, id="kueue"),
    pytest.param("app.kubernetes.io/name", True, id="kubernetes-subdomain"),
    pytest.param("training.opendatahub.io/queue-state", True, id="ours"),
])
def test_reserved_label(key: str, reserved: bool) -> None:
    assert reserved_label(key) is reserved


@pytest.mark.parametrize("token", [
    pytest.param(problems.encode_continue(2, "abc"), id="ours"),
    pytest.param(problems.encode_continue(0, None), id="ours-without-server-token"),
])
def test_continue_tokens_round_trip(token: str) -> None:
    index, inner = problems.decode_continue(token, 4)
    assert problems.encode_continue(index, inner) == token


@pytest.mark.parametrize("token", [
    pytest.param("!!!", id="not-base64"),
    pytest.param(problems.encode_continue(9, "x"), id="kind-out-of-range"),
    pytest.param("bnVsbA", id="json-but-not-an-object"),
])
def test_foreign_continue_tokens_are_refused(token: str) -> None:
    with pytest.raises(ValueError, match="continue token"):
        problems.decode_continue(token, 4)

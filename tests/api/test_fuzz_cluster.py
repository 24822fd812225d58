"""Schema-based fuzzing (schemathesis) of the real app against the local cluster, and raw
request bodies (pathological ones included) from an authorised user: no 5xx."""

from __future__ import annotations

from typing import Any

import schemathesis
from flask import Flask
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    response_schema_conformance,
    status_code_conformance,
)

from tests.api.conftest import job_request
from tests.api.test_fuzz import BODIES

EXAMPLES = 25


def test_no_server_errors(app: Flask, user: dict[str, str], namespace: str) -> None:
    schema = schemathesis.openapi.from_wsgi("/openapi.json", app)
    statuses: list[int] = []
    calls = 0
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result
        operation = result.ok()

        @settings(max_examples=EXAMPLES, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy(), own=st.booleans())
        def run(case: Any, own: bool) -> None:
            nonlocal calls
            if own and "namespace" in (case.path_parameters or {}):
                case.path_parameters["namespace"] = namespace  # mostly where the user may act
            response = case.call(headers=user)
            calls += 1
            statuses.append(response.status_code)
            # raises (and hypothesis shrinks the case) on a 5xx or an undocumented answer
            case.validate_response(response, checks=[
                not_a_server_error, status_code_conformance, response_schema_conformance])

        run()
        if operation.method == "post":
            # Random bodies rarely pass validation: one valid request checks the 201 answer.
            case = operation.Case(path_parameters={"namespace": namespace},
                                  body=job_request("fuzz-valid"), media_type="application/json")
            response = case.call(headers=user)
            statuses.append(response.status_code)
            case.validate_response(response, checks=[
                not_a_server_error, status_code_conformance, response_schema_conformance])
    assert calls >= EXAMPLES * 3
    assert all(status < 500 for status in statuses)
    assert 201 in statuses
    # It reached real jobs, not only refusals: whatever the random cases were, the job the
    # valid request made reads back, and so do the namespace's list and a missing job.
    client = app.test_client()
    jobs = f"/v1/namespaces/{namespace}/jobs"
    assert [client.get(path, headers=user).status_code
            for path in (jobs, f"{jobs}/fuzz-valid", f"{jobs}/no-such-job")] == [200, 200, 404]


@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(body=BODIES)
@example(body=b"[" * 50_000)
def test_raw_job_bodies_never_answer_5xx(app: Flask, user: dict[str, str], namespace: str,
                                         body: bytes) -> None:
    answer = app.test_client().post(f"/v1/namespaces/{namespace}/jobs", data=body,
                                    headers=user, content_type="application/json")
    assert answer.status_code in (201, 400, 403, 409, 413, 422), (
        answer.status_code, answer.get_data(as_text=True)[:300])

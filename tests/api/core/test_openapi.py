"""The OpenAPI document is valid OpenAPI 3.1 and says what the models check."""

from __future__ import annotations

from openapi_spec_validator import validate

from functions.api.core.openapi import document


def test_document_is_valid_openapi() -> None:
    validate(document("1.2.3"))  # raises on any violation


def test_document_describes_every_operation_and_problem() -> None:
    doc = document("1.2.3")
    operations = {op["operationId"] for path in doc["paths"].values()
                  for method, op in path.items() if method != "parameters"}
    assert operations == {"createJob", "listJobs", "getJob", "deleteJob", "getJobLogs",
                          "getJobEvents"}
    request = doc["components"]["schemas"]["JobRequest"]
    assert sorted(request["required"]) == ["framework", "image", "name"]
    assert request["properties"]["workers"]["minimum"] == 1
    assert request["properties"]["framework"]["enum"] == ["pytorch", "tensorflow", "mpi",
                                                          "mxnet", "xgboost", "paddle", "jax"]
    trainjob = doc["components"]["schemas"]["TrainJobRequest"]
    assert sorted(trainjob["required"]) == ["image", "name", "runtime"]
    assert trainjob["properties"]["framework"]["const"] == "trainjob"
    assert trainjob["properties"]["numNodes"]["minimum"] == 1
    assert "workers" not in trainjob["properties"]
    body = doc["paths"]["/v1/namespaces/{namespace}/jobs"]["post"]["requestBody"]
    assert body["content"]["application/json"]["schema"]["oneOf"] == [
        {"$ref": "#/components/schemas/JobRequest"},
        {"$ref": "#/components/schemas/TrainJobRequest"}]
    create = doc["paths"]["/v1/namespaces/{namespace}/jobs"]["post"]["responses"]
    assert create["422"]["content"]["application/problem+json"]["schema"] == {
        "$ref": "#/components/schemas/Problem"}
    listing = doc["paths"]["/v1/namespaces/{namespace}/jobs"]["get"]["parameters"]
    assert [p["name"] for p in listing] == ["state", "labelSelector", "limit", "continue"]
    assert all("null" not in str(p["schema"]) for p in listing)

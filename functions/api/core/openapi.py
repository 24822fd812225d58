"""The OpenAPI 3.1 document of the training API, generated from the pydantic models.

Request bodies, query parameters, responses and problems all come from the same models the
service validates with, so the document cannot drift from the behaviour. Path parameters use
the patterns the service checks.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from functions.api.core.models import (
    EventList,
    JobList,
    JobRequest,
    JobView,
    Problem,
    State,
    TrainJobRequest,
)
from functions.api.core.problems import PROBLEM_JSON

API_PREFIX = "/v1/namespaces/{namespace}/jobs"
NAMESPACE_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
REF = "#/components/schemas/{model}"


class _Query(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class ListQuery(_Query):
    state: State | None = Field(default=None, description="only jobs in this state")
    label_selector: str | None = Field(default=None, max_length=1024,
                                       description="Kubernetes label selector")
    limit: int = Field(default=100, ge=1, le=500, description="page size")
    continue_: str | None = Field(default=None, alias="continue", max_length=4096,
                                  description="token from the previous page")


class LogQuery(_Query):
    replica: str | None = Field(default=None, max_length=32, pattern=r"^[a-z]+$", description=(
        "replica type, lower case (master, worker, launcher...); default: the main one"))
    index: int = Field(default=0, ge=0, le=100000)
    follow: bool = False
    tail_lines: int | None = Field(default=None, ge=1, le=100000)


def _problem_responses(*codes: int) -> dict[str, Any]:
    reasons = {400: "bad request", 401: "missing or invalid bearer token",
               403: "not allowed", 404: "no such job", 409: "a job of that name exists",
               410: "the continue token expired", 413: "body too large",
               415: "not JSON", 422: "invalid request",
               502: "the cluster could not serve the request",
               503: "the cluster (or this service) is unavailable: retry after Retry-After"}
    return {str(code): {"description": reasons.get(code, "error"), "content": {
        PROBLEM_JSON: {"schema": {"$ref": REF.format(model="Problem")}}}} for code in codes}


def _json(model: str, description: str) -> dict[str, Any]:
    return {"description": description,
            "content": {"application/json": {"schema": {"$ref": REF.format(model=model)}}}}


def _query_parameters(model: type[BaseModel]) -> list[dict[str, Any]]:
    schema = model.model_json_schema(by_alias=True, ref_template=REF)
    out = []
    for name, prop in schema["properties"].items():
        description = prop.pop("description", "")
        prop.pop("title", None)
        prop = _without_null(prop)
        param: dict[str, Any] = {"name": name, "in": "query", "required": False,
                                 "schema": prop}
        if description:
            param["description"] = description
        out.append(param)
    return out


def _without_null(schema: dict[str, Any]) -> dict[str, Any]:
    """A query parameter is absent rather than null: drop the ``null`` branch and default."""
    branches = schema.get("anyOf")
    if not isinstance(branches, list):
        return schema
    rest = [b for b in branches if b != {"type": "null"}]
    if len(rest) != 1:
        return schema
    out = {k: v for k, v in schema.items() if k != "anyOf"}
    if out.get("default", 0) is None:
        del out["default"]
    return {**rest[0], **out}


def _path_parameter(name: str, pattern: str, max_length: int) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True,
            "schema": {"type": "string", "pattern": pattern, "minLength": 1,
                       "maxLength": max_length}}


def document(version: str) -> dict[str, Any]:
    """The OpenAPI document of the API at ``version`` (the package's)."""
    models: list[tuple[type[BaseModel], JsonSchemaMode]] = [
        (JobRequest, "validation"), (TrainJobRequest, "validation"),
        (JobView, "serialization"), (JobList, "serialization"),
        (EventList, "serialization"), (Problem, "serialization")]
    _, defs = models_json_schema(models, by_alias=True, ref_template=REF)
    schemas = dict(defs.get("$defs", {}))
    namespace = _path_parameter("namespace", NAMESPACE_PATTERN, 63)
    name = _path_parameter("name", NAME_PATTERN, 253)
    common = (401, 403, 502, 503)
    paths: dict[str, Any] = {
        API_PREFIX: {
            "parameters": [namespace],
            "post": {
                "operationId": "createJob", "summary": (
                    "submit a training job (queued): a kubeflow.org job, or a TrainJob "
                    "(framework trainjob, or a runtime without a framework)"),
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"oneOf": [{"$ref": REF.format(model="JobRequest")},
                                         {"$ref": REF.format(model="TrainJobRequest")}]}}}},
                "responses": {"201": _json("JobView", "created, suspended until admitted"),
                              **_problem_responses(400, 409, 413, 415, 422, *common)}},
            "get": {
                "operationId": "listJobs", "summary": "list training jobs",
                "parameters": _query_parameters(ListQuery),
                "responses": {"200": _json("JobList", "one page of jobs"),
                              **_problem_responses(400, 410, 422, *common)}},
        },
        f"{API_PREFIX}/{{name}}": {
            "parameters": [namespace, name],
            "get": {"operationId": "getJob", "summary": "one training job",
                    "responses": {"200": _json("JobView", "the job"),
                                  **_problem_responses(400, 404, *common)}},
            "delete": {"operationId": "deleteJob", "summary": "delete (and dequeue) a job",
                       "responses": {"204": {"description": "deleted"},
                                     **_problem_responses(400, 404, *common)}},
        },
        f"{API_PREFIX}/{{name}}/logs": {
            "parameters": [namespace, name],
            "get": {"operationId": "getJobLogs", "summary": "logs of one replica",
                    "parameters": _query_parameters(LogQuery),
                    "responses": {"200": {"description": "log text", "content": {
                        "text/plain": {"schema": {"type": "string"}}}},
                        **_problem_responses(400, 404, 422, *common)}},
        },
        f"{API_PREFIX}/{{name}}/events": {
            "parameters": [namespace, name],
            "get": {"operationId": "getJobEvents", "summary": "Kubernetes Events of the job",
                    "responses": {"200": _json("EventList", "events, oldest first"),
                                  **_problem_responses(400, 404, *common)}},
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "Training API", "version": version, "description": (
            "Submit, queue and follow Kubeflow training jobs; every job is a CR.")},
        "paths": paths,
        "components": {"schemas": schemas, "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer",
                       "description": "a Kubernetes token (checked with TokenReview)"}}},
        "security": [{"bearer": []}],
    }


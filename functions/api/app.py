"""The HTTP face of the training API: Flask routes over TokenReview, SubjectAccessReview and
the job CRs.

Every route authenticates the caller's bearer token, asks the API server whether that user
may do the action on the job kind in the namespace, and only then acts with the service's own
ServiceAccount. A caller who may not see a job cannot tell it from a job that does not exist.
Every error is an ``application/problem+json`` document; a request that fails validation
names each offending field. Nothing is stored outside the CRs. No answer is a 500: input that
cannot be read or parsed is a 4xx, a cluster that cannot be reached (no API client, the API
server unavailable) is a 503 with ``Retry-After``, and so is a fault of this service (logged
with its traceback), as the function apps answer.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from flask import Flask, Response, request
from pydantic import BaseModel, ValidationError
from werkzeug.exceptions import HTTPException

import functions
from functions.api import store
from functions.api.auth import Action, AuthError, Authorizer, User
from functions.api.core import crs
from functions.api.core.models import (
    KIND_BY_FRAMEWORK,
    AnyJobRequest,
    EventList,
    FieldError,
    JobList,
    JobView,
    Problem,
    TrainJobRequest,
    parse_request,
)
from functions.api.core.openapi import (
    NAME_PATTERN,
    NAMESPACE_PATTERN,
    ListQuery,
    LogQuery,
    document,
)
from functions.api.core.problems import (
    PROBLEM_JSON,
    ProblemError,
    field_errors,
    invalid_request,
    problem,
    single_field,
)
from functions.api.logs import pod_logs
from functions.api.policy import PolicySource
from functions.core.errors import TemporaryError
from functions.kube import resources
from functions.kube.client import ApiError, KubeClient

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 64 * 1024
NO_CLIENT_RETRY_SECONDS = 10.0
FAULT_RETRY_SECONDS = 30
KubeFactory = Callable[[], KubeClient]
Obj = dict[str, Any]
Q = TypeVar("Q", bound=BaseModel)


def _default_kube() -> KubeClient:
    return KubeClient.from_config(retries=2)


class ApiService:
    """Per-process state: the service's API client (made after any fork) and its caches."""

    def __init__(self, kube_factory: KubeFactory | None, max_body_bytes: int | None,
                 clock: Callable[[], datetime]) -> None:
        self._factory = kube_factory or _default_kube
        self.max_body_bytes = max_body_bytes or int(
            os.environ.get("TRAINING_API_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES))
        self.clock = clock
        self._guard = threading.Lock()
        self._kube: KubeClient | None = None
        self._pid = 0
        self.authorizer = Authorizer(self.kube)
        self.kueue = store.KueueProbe()
        self.policy = PolicySource()

    def kube(self) -> KubeClient:
        """The API client, built on first use; ``TemporaryError`` (503) when it cannot be."""
        with self._guard:
            if self._kube is None or self._pid != os.getpid():
                try:
                    self._kube = self._factory()
                except Exception as exc:
                    raise TemporaryError(f"no Kubernetes API client: {exc}",
                                         NO_CLIENT_RETRY_SECONDS) from exc
                self._pid = os.getpid()
            return self._kube


# -- request checks and answers ---------------------------------------------------------------

def _json(model: BaseModel, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    body = model.model_dump_json(by_alias=True)
    return Response(body, status=status, mimetype="application/json", headers=headers)


def _problem_response(body: Problem, headers: dict[str, str] | None = None) -> Response:
    response = Response(body.model_dump_json(by_alias=True), status=body.status,
                        mimetype=PROBLEM_JSON, headers=headers)
    if body.status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="training-api"'
    return response


def _check_path(namespace: str, name: str | None = None) -> None:
    if len(namespace) > 63 or not re.fullmatch(NAMESPACE_PATTERN, namespace):
        raise ProblemError(single_field(400, "namespace", "not a namespace name"))
    if name is not None and (len(name) > 253 or not re.fullmatch(NAME_PATTERN, name)):
        raise ProblemError(single_field(400, "name", "not a job name"))


def _query(model: type[Q]) -> Q:
    try:
        return model.model_validate(request.args.to_dict())
    except ValidationError as exc:
        errors = field_errors(exc)
        names = ", ".join(dict.fromkeys(e.field for e in errors))
        raise ProblemError(problem(400, f"invalid query: {names}", errors)) from exc


def _api_problem(exc: ApiError, what: str) -> ProblemError:
    """An API-server refusal as the caller should see it."""
    if exc.status in (400, 422):
        causes = (exc.body.get("details") or {}).get("causes") or []
        errors = [FieldError(field=str(c.get("field") or "body"),
                             message=str(c.get("message") or ""), type=str(c.get("reason") or ""))
                  for c in causes]
        return ProblemError(problem(422, f"{what}: {exc.message}", errors))
    if exc.status == 404:
        return ProblemError(problem(404, f"{what}: {exc.message}"))
    if exc.status == 409:
        return ProblemError(single_field(409, "name", exc.message))
    if exc.status == 410:
        return ProblemError(single_field(410, "continue", exc.message))
    return ProblemError(problem(502, f"{what}: the API server answered {exc.status} "
                                     f"{exc.reason}: {exc.message}"))


# -- the app ------------------------------------------------------------------------------------

def create_api_app(kube_factory: KubeFactory | None = None, *,
                   max_body_bytes: int | None = None,
                   clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> Flask:
    """The WSGI app of the training API."""
    service = ApiService(kube_factory, max_body_bytes, clock)
    app = Flask("functions.api")
    app.extensions["functions.api"] = service
    openapi_text = json.dumps(document(functions.__version__))

    def authenticated() -> User:
        return service.authorizer.authenticate(request.headers.get("Authorization"))

    def authorize_job(user: User, verb: str, namespace: str, cr: Obj | None) -> Obj:
        """``cr`` if ``user`` may ``verb`` it; 404 when missing or hidden, 403 when the user
        may not ``verb`` jobs of any kind here."""
        allow = service.authorizer.allowed
        if cr is not None:
            res = store.BY_KIND[str(cr["kind"])]
            if allow(user, Action(verb, namespace, res)):
                return cr
        name = request.view_args.get("name") if request.view_args else ""
        if any(allow(user, Action(verb, namespace, res)) for res in store.KINDS):
            raise ProblemError(problem(404, f"no job {name} in namespace {namespace}"))
        raise AuthError(403, f"{user.name} may not {verb} training jobs in namespace "
                             f"{namespace}")

    def visible_job(namespace: str, name: str, verb: str) -> tuple[User, Obj]:
        _check_path(namespace, name)
        user = authenticated()
        cr = store.find_job(service.kube(), namespace, name)
        return user, authorize_job(user, verb, namespace, cr)

    def view(cr: Obj) -> JobView:
        positions: dict[tuple[str, str, str], int] = {}
        if crs.state_of(cr) == "Queued":
            kube = service.kube()
            positions = store.queue_positions(kube, cr["metadata"]["namespace"],
                                              service.policy.get(kube, strict=False))
        return crs.job_view(cr, crs.position_in(cr, positions))

    @app.post("/v1/namespaces/<namespace>/jobs")
    def create_job(namespace: str) -> Response:
        _check_path(namespace)
        user = authenticated()
        job_request = _read_request(service.max_body_bytes)
        res = store.BY_KIND[KIND_BY_FRAMEWORK[job_request.framework]]
        service.authorizer.require(user, Action("create", namespace, res))
        kube = service.kube()
        if isinstance(job_request, TrainJobRequest) and not store.runtime_exists(
                kube, job_request.runtime):
            raise ProblemError(single_field(
                422, "runtime", f"no ClusterTrainingRuntime named {job_request.runtime}"))
        if job_request.priority > 0:  # lowering a priority needs no policy
            refusal = service.policy.get(kube).refusal(namespace, job_request.priority)
            if refusal is not None:
                raise ProblemError(single_field(403, "priority", refusal))
        if store.find_job(kube, namespace, job_request.name) is not None:
            raise ProblemError(single_field(
                409, "name", f"a training job named {job_request.name} exists"))
        kueue = job_request.queue is not None and service.kueue.served(kube)
        cr = crs.build_job(job_request, namespace, service.clock(), user.name, kueue)
        try:
            created = kube.create(cr, res=res, field_manager=store.FIELD_MANAGER)
        except ApiError as exc:
            raise _api_problem(exc, f"cannot create {res.kind} {job_request.name}") from exc
        created.setdefault("apiVersion", res.api_version)
        created.setdefault("kind", res.kind)
        location = f"/v1/namespaces/{namespace}/jobs/{job_request.name}"
        return _json(view(created), 201, {"Location": location})

    @app.get("/v1/namespaces/<namespace>/jobs")
    def list_jobs(namespace: str) -> Response:
        _check_path(namespace)
        user = authenticated()
        query = _query(ListQuery)
        allowed = {res.kind for res in store.KINDS
                   if service.authorizer.allowed(user, Action("list", namespace, res))}
        if not allowed:
            raise AuthError(403, f"{user.name} may not list training jobs in namespace "
                                 f"{namespace}")
        kube = service.kube()
        try:
            items, token = store.list_page(kube, namespace, allowed,
                                           label_selector=query.label_selector,
                                           limit=query.limit, continue_token=query.continue_)
        except ValueError as exc:
            raise ProblemError(single_field(400, "continue", str(exc))) from exc
        except ApiError as exc:
            if exc.status == 400:
                raise ProblemError(single_field(400, "labelSelector", exc.message)) from exc
            raise _api_problem(exc, "cannot list jobs") from exc
        positions: dict[tuple[str, str, str], int] = {}
        if any(crs.state_of(cr) == "Queued" for cr in items):
            positions = store.queue_positions(kube, namespace,
                                              service.policy.get(kube, strict=False))
        views = [crs.job_view(cr, crs.position_in(cr, positions)) for cr in items]
        if query.state:
            views = [v for v in views if v.state == query.state]
        return _json(JobList.model_validate({"items": views, "continue": token}))

    @app.get("/v1/namespaces/<namespace>/jobs/<name>")
    def get_job(namespace: str, name: str) -> Response:
        _, cr = visible_job(namespace, name, "get")
        return _json(view(cr))

    @app.delete("/v1/namespaces/<namespace>/jobs/<name>")
    def delete_job(namespace: str, name: str) -> Response:
        _, cr = visible_job(namespace, name, "delete")
        res = store.BY_KIND[str(cr["kind"])]
        try:
            service.kube().delete(res, name, namespace, uid=cr["metadata"].get("uid"))
        except ApiError as exc:
            raise _api_problem(exc, f"cannot delete {res.kind} {name}") from exc
        return Response(status=204)

    @app.get("/v1/namespaces/<namespace>/jobs/<name>/events")
    def job_events(namespace: str, name: str) -> Response:
        _, cr = visible_job(namespace, name, "get")
        selector = f"involvedObject.name={name},involvedObject.kind={cr['kind']}"
        events = service.kube().list(resources.EVENTS, namespace, field_selector=selector)
        return _json(EventList(items=crs.event_views(events, cr["metadata"].get("uid"))))

    @app.get("/v1/namespaces/<namespace>/jobs/<name>/logs")
    def job_logs(namespace: str, name: str) -> Response:
        user, cr = visible_job(namespace, name, "get")
        query = _query(LogQuery)
        service.authorizer.require(user, Action("get", namespace, resources.PODS, "log"))
        return pod_logs(service.kube(), cr, query)

    @app.get("/openapi.json")
    def openapi() -> Response:
        return Response(openapi_text, mimetype="application/json")

    @app.get("/health/liveness")
    def liveness() -> Response:
        return Response("ok\n", mimetype="text/plain")

    @app.get("/health/readiness")
    def readiness() -> Response:
        try:
            service.kube()
        except Exception as exc:
            return Response(f"no API client: {exc}\n", status=503, mimetype="text/plain")
        return Response("ready\n", mimetype="text/plain")

    @app.errorhandler(ProblemError)
    def problem_error(exc: ProblemError) -> Response:
        return _problem_response(exc.body, exc.headers)

    @app.errorhandler(AuthError)
    def auth_error(exc: AuthError) -> Response:
        return _problem_response(problem(exc.status, exc.detail))

    @app.errorhandler(TemporaryError)
    def temporary(exc: TemporaryError) -> Response:
        retry = str(max(1, int(exc.retry_after + 0.999)))
        return _problem_response(problem(503, f"the cluster is unavailable: {exc}"),
                                 {"Retry-After": retry})

    @app.errorhandler(ApiError)
    def api_error(exc: ApiError) -> Response:
        return problem_error(_api_problem(exc, "the API server refused"))

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        return _problem_response(problem(exc.code or 400, exc.description or exc.name))

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> Response:
        log.exception("unexpected error while serving %s %s", request.method, request.path)
        return _problem_response(problem(503, f"internal error: {type(exc).__name__}"),
                                 {"Retry-After": str(FAULT_RETRY_SECONDS)})

    return app


def _read_request(limit: int) -> AnyJobRequest:
    mimetype = request.mimetype or ""
    if mimetype != "application/json" and not mimetype.endswith("+json"):
        raise ProblemError(single_field(415, "body", "send the job as application/json"))
    length = request.content_length
    try:
        body = b"" if length is not None and length > limit else request.stream.read(limit + 1)
    except Exception as exc:  # the server's reader: bad chunked framing, a client gone
        raise ProblemError(single_field(
            400, "body", f"could not be read: {type(exc).__name__}")) from exc
    if (length is not None and length > limit) or len(body) > limit:
        raise ProblemError(single_field(413, "body", f"larger than {limit} bytes"),
                           {"Connection": "close"})
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProblemError(single_field(400, "body", f"not JSON: {exc}")) from exc
    except RecursionError as exc:
        raise ProblemError(single_field(400, "body", "JSON nested too deeply")) from exc
    try:
        return parse_request(data)
    except ValidationError as exc:
        raise ProblemError(invalid_request(exc)) from exc

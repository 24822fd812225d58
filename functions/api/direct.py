"""The CLI's jobs straight from the job CRs, as the kubeconfig's user: no training API between.

The same pure code as the API builds a job's CR from a request and reads a view back from a CR
(:mod:`functions.api.core.crs`), so both modes print the same views. What differs is who acts
and what is checked: here every request is the user's own, so the user's RBAC decides (create,
get, list and delete on the job kinds; list pods and get ``pods/log`` for logs), and the API's
own checks do not run. The job is still created suspended and labelled for the queue, which
admits it in turn, but a priority above the namespace's maximum is capped by the queue rather
than refused, the submission time and submitter on the CR are the client's word, and views
show no queue position (the order needs the platform's priority policy, which users cannot
read).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from functions.api import store
from functions.api.core import crs, render
from functions.api.core.models import KIND_BY_FRAMEWORK, TrainJobRequest, parse_request
from functions.api.core.problems import invalid_request
from functions.api.exits import CliError, ExitCode, NotFound
from functions.kube import resources
from functions.kube.client import ApiError, KubeClient
from functions.kube.resources import Resource
from functions.kube.transport import HttpTransport, Request, TransportError

Obj = dict[str, Any]
FIELD_MANAGER = "odh-training-cli"
SELFSUBJECTREVIEWS = Resource("authentication.k8s.io", "v1", "selfsubjectreviews",
                              "SelfSubjectReview", namespaced=False)
LOG_TIMEOUT = 30.0
FOLLOW_TIMEOUT = 3600.0  # the longest a followed log may stay quiet
ROLE_HINT = "ask for the training role"


def forbidden(verb: str, what: str, namespace: str | None) -> CliError:
    where = f"in {namespace}" if namespace else "in all namespaces"
    return CliError(ExitCode.FAILED, f"forbidden: your user may not {verb} {what} {where} "
                                     f"({ROLE_HINT})")


def refused(exc: ApiError, verb: str, res: Resource, namespace: str | None,
            name: str = "") -> CliError:
    """What the API server's refusal of the user's own request means to the user."""
    if exc.status == 403:
        return forbidden(verb, res.plural, namespace)
    if exc.status == 401:
        return CliError(ExitCode.FAILED, "unauthorized: the API server does not accept your "
                                         "credentials (log in again, or pass --token)")
    if exc.status == 404:
        return CliError(ExitCode.FAILED, f"not found: no {res.kind} {name} in {namespace}")
    if exc.status == 409:
        return CliError(ExitCode.FAILED, f"conflict: {exc.message}")
    causes = (exc.body.get("details") or {}).get("causes") or []
    fields = "; ".join(f"{c.get('field') or 'body'}: {c.get('message')}" for c in causes)
    message = exc.message + (f" ({fields})" if fields and fields not in exc.message else "")
    return CliError(ExitCode.FAILED, f"the API server refused to {verb} {res.kind} {name} "
                                     f"({exc.status} {exc.reason}): {message}")


class DirectJobs:
    """Training jobs of ``namespace`` (every namespace when it is ``None``) through ``kube``,
    authenticated as the user."""

    def __init__(self, kube: KubeClient, namespace: str | None) -> None:
        self.kube = kube
        self.namespace = namespace

    # -- reading --------------------------------------------------------------------------------

    def find(self, name: str) -> Obj:
        """The job CR of that name, whatever its kind (kinds the user may not read are
        skipped, as the API skips kinds its caller may not see)."""
        allowed = False
        for res in store.KINDS:
            try:
                found = self.kube.get(res, name, self.namespace)
            except ApiError as exc:
                if exc.status == 403:
                    continue
                raise refused(exc, "get", res, self.namespace, name) from exc
            allowed = True
            if found is not None:
                found.setdefault("apiVersion", res.api_version)
                found.setdefault("kind", res.kind)
                return found
        if not allowed:
            raise forbidden("get", "training jobs", self.namespace)
        raise NotFound(f"not found: no training job {name} in namespace {self.namespace} "
                       "(check the name and -n)")

    def get(self, name: str) -> Obj:
        return view(self.find(name))

    def list_all(self, state: str | None = None,
                 label_selector: str | None = None) -> list[Obj]:
        """Every job of the kinds the user may list (a kind whose CRD is not installed has
        none); forbidden only when no kind may be listed."""
        items: list[Obj] = []
        listed = refused_any = False
        for res in store.KINDS:
            try:
                items.extend(self.kube.list(res, self.namespace, label_selector=label_selector))
            except ApiError as exc:
                if exc.status in (403, 404):  # not the user's, or not installed
                    refused_any = refused_any or exc.status == 403
                    continue
                if exc.status == 400:
                    raise CliError(ExitCode.FAILED, f"invalid selector: {exc.message}") from exc
                raise refused(exc, "list", res, self.namespace) from exc
            listed = True
        if refused_any and not listed:
            raise forbidden("list", "training jobs", self.namespace)
        views = [view(cr) for cr in items]
        return [v for v in views if v["state"] == state] if state else views

    # -- writing --------------------------------------------------------------------------------

    def create(self, body: Obj) -> Obj:
        """Create the job CR the API would create for ``body``, as the user."""
        namespace = self.namespace
        if namespace is None:
            raise CliError(ExitCode.USAGE, "a job is submitted to one namespace, not to -A")
        try:
            request = parse_request(body)
        except ValidationError as exc:
            raise CliError(ExitCode.FAILED, render.problem_line(
                invalid_request(exc).model_dump(by_alias=True))) from exc
        res = store.BY_KIND[KIND_BY_FRAMEWORK[request.framework]]
        if isinstance(request, TrainJobRequest) and not self._runtime_exists(request.runtime):
            raise CliError(ExitCode.FAILED, f"runtime: no ClusterTrainingRuntime named "
                                            f"{request.runtime} (list them with kubectl get "
                                            "clustertrainingruntimes)")
        kueue = request.queue is not None and self._kueue_served()
        cr = crs.build_job(request, namespace, datetime.now(UTC), self._whoami(), kueue)
        try:
            created = self.kube.create(cr, res=res, field_manager=FIELD_MANAGER)
        except ApiError as exc:
            if exc.status == 409:
                raise CliError(ExitCode.FAILED, f"conflict: a {res.kind} named {request.name} "
                                                f"exists in {self.namespace} (choose another "
                                                "name, or delete it first)") from exc
            raise refused(exc, "create", res, self.namespace, request.name) from exc
        created.setdefault("apiVersion", res.api_version)
        created.setdefault("kind", res.kind)
        return view(created)

    def delete(self, name: str) -> None:
        cr = self.find(name)
        res = store.BY_KIND[str(cr["kind"])]
        try:
            gone = self.kube.delete(res, name, self.namespace, uid=cr["metadata"].get("uid"))
        except ApiError as exc:
            raise refused(exc, "delete", res, self.namespace, name) from exc
        if not gone:
            raise CliError(ExitCode.FAILED, f"not found: {res.kind} {name} was deleted by "
                                            "someone else")

    # -- logs -----------------------------------------------------------------------------------

    def logs(self, name: str, replica: str | None = None, index: int | None = None,
             follow: bool = False, tail_lines: int | None = None) -> Iterator[bytes]:
        """The log of one replica's newest pod, through the API server's pod log proxy."""
        cr = self.find(name)
        replica = replica or crs.primary_replica(cr)
        try:
            pods = self.kube.list(resources.PODS, self.namespace,
                                  label_selector=crs.log_pod_selector(cr, replica, index or 0))
        except ApiError as exc:
            raise refused(exc, "list", resources.PODS, self.namespace) from exc
        pod = crs.newest(pods)
        if pod is None:
            raise CliError(ExitCode.FAILED, f"job {name} has no {replica} pod {index or 0} "
                                            "(yet): see its state with get")
        params = {"container": crs.log_container(cr, pod)}
        if tail_lines is not None:
            params["tailLines"] = str(tail_lines)
        if follow:
            params["follow"] = "true"
        pod_name = pod["metadata"]["name"]
        request = Request("GET", resources.PODS.path(self.namespace, pod_name, "log"), params)
        yield from self._log(request, pod, follow)

    def _log(self, request: Request, pod: Obj, follow: bool) -> Iterator[bytes]:
        transport = self.kube.transport
        assert isinstance(transport, HttpTransport)
        try:
            status, _, raw = transport.stream(request, FOLLOW_TIMEOUT if follow
                                              else LOG_TIMEOUT)
        except TransportError as exc:
            raise CliError(ExitCode.UNREACHABLE, f"cannot reach the cluster: {exc}") from exc
        try:
            if status != 200:
                raise _log_refused(status, raw.read(), pod)
            yield from raw.stream(4096)
        except TransportError as exc:
            raise CliError(ExitCode.UNREACHABLE, f"the log was cut: {exc}") from exc
        finally:
            raw.release_conn()

    # -- what the API would ask with its own identity, asked as the user -----------------------

    def _runtime_exists(self, name: str) -> bool:
        """Whether the runtime exists; ``True`` when the user may not read runtimes (the
        Trainer's admission webhook then judges the TrainJob)."""
        try:
            return store.runtime_exists(self.kube, name)
        except ApiError as exc:
            if exc.status == 403:
                return True
            raise

    def _kueue_served(self) -> bool:
        try:
            return store.KueueProbe().served(self.kube)
        except ApiError:
            return False

    def _whoami(self) -> str:
        """The user's name, for the job's submitted-by annotation ("" when the API server
        cannot say: SelfSubjectReview is served from Kubernetes 1.28)."""
        try:
            answer = self.kube.create({"apiVersion": SELFSUBJECTREVIEWS.api_version,
                                       "kind": SELFSUBJECTREVIEWS.kind, "metadata": {}},
                                      res=SELFSUBJECTREVIEWS)
        except ApiError:
            return ""
        info = (answer.get("status") or {}).get("userInfo") or {}
        return str(info.get("username") or "")


def view(cr: Obj) -> Obj:
    """The API's view of a job CR, as its JSON document (no queue position: see above)."""
    return crs.job_view(cr).model_dump(mode="json", by_alias=True)


def _log_refused(status: int, body: bytes, pod: Obj) -> CliError:
    try:
        data = json.loads(body)
    except ValueError:
        data = {"message": body[:500].decode("utf-8", "replace")}
    message = str(data.get("message") if isinstance(data, dict) else data)
    pod_name = pod["metadata"]["name"]
    namespace = pod["metadata"].get("namespace")
    if status == 403:
        return forbidden("get", "pods/log", namespace)
    if status in (400, 404):
        return CliError(ExitCode.FAILED, f"pod {pod_name}: {message}")
    node = (pod.get("spec") or {}).get("nodeName") or "its node"
    return CliError(ExitCode.FAILED, f"the API server could not get the logs of pod {pod_name} "
                                     f"from the kubelet of {node} ({status}): {message}")

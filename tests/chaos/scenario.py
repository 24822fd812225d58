"""The recorded scenario of the chaos suites and the cluster state they compare.

The scenario is the Trainer sample plus a PyTorchJob, a TFJob and an MPIJob from
``config/samples`` that kwok drives to success (result label on their pods; the MPI launcher is
a batch Job, which kwok completes on its own, and its workers keep running like sshd would).
:func:`record_scenario` runs it through the real ApiServerSource adapter (the dev stack) and
keeps every event the router passed on; the chaos tests replay that file.

:func:`snapshot` reduces a cluster to what must not depend on the order, repetition or loss of
events: which objects exist, their specs and their status conditions, with everything the API
server or the clock assigns (uids, resourceVersions, timestamps, generated names) left out.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from devstack.cluster import kwok
from devstack.recording import RecordedRequest
from functions.kube import resources
from functions.kube.client import KubeClient
from functions.kube.resources import Resource
from tests.support import REPO

Obj = dict[str, Any]

RECORDINGS = REPO / "tests" / "data" / "recordings"
RECORDING = RECORDINGS / "chaos-samples.jsonl"
SAMPLES = REPO / "config" / "samples"
JOBS_NAMESPACE = "chaos-demo"
JOB_KINDS = ("PyTorchJob", "TFJob", "MPIJob")
FIELD_MANAGER = "chaos-user"
FINISH_DELAY = "2s"

# The namespaced kinds the controllers create or own, compared by snapshot().
JOB_STATE_RESOURCES: tuple[Resource, ...] = (
    resources.PYTORCHJOBS, resources.TFJOBS, resources.MPIJOBS, resources.PODS,
    resources.SERVICES, resources.CONFIGMAPS, resources.SECRETS, resources.JOBS)
TRAINER_STATE_RESOURCES: tuple[Resource, ...] = (
    resources.DEPLOYMENTS, resources.SERVICES, resources.CONFIGMAPS,
    resources.SERVICEACCOUNTS)


def _sample(kind: str) -> Obj:
    data = yaml.safe_load((SAMPLES / f"{kind.lower()}.yaml").read_text())
    assert isinstance(data, dict)
    return data


def _replica_specs(job: Obj) -> dict[str, Obj]:
    spec = job["spec"]
    key = next(k for k in spec if k.endswith("ReplicaSpecs"))
    specs: dict[str, Obj] = spec[key]
    return specs


def succeeding_job(kind: str, namespace: str = JOBS_NAMESPACE) -> Obj:
    """A sample job whose pods kwok finishes successfully after :data:`FINISH_DELAY`;
    ``kind`` names the sample (``MPIJob-v1``: an MPIJob of kubeflow.org/v1)."""
    job = copy.deepcopy(_sample(kind))
    job["metadata"]["namespace"] = namespace
    job["spec"].get("runPolicy", {}).pop("ttlSecondsAfterFinished", None)
    for rtype, replica in _replica_specs(job).items():
        if job["kind"] == "MPIJob" and rtype == "Worker":
            continue  # workers serve the launcher until it is done
        meta = replica["template"].setdefault("metadata", {})
        meta.setdefault("labels", {})[kwok.RESULT_LABEL] = "succeed"
        meta.setdefault("annotations", {})[kwok.DELAY_ANNOTATION] = FINISH_DELAY
    return job


def scenario_jobs(namespace: str = JOBS_NAMESPACE) -> list[Obj]:
    return [succeeding_job(kind, namespace) for kind in JOB_KINDS]


def trainer_sample() -> Obj:
    return _sample("Trainer")


# -- the recorded stream ---------------------------------------------------------------------


def event_of(request: RecordedRequest) -> tuple[dict[str, str], Obj | None]:
    """The CloudEvent attributes (lower-case, without ``ce-``) and the data object."""
    headers = {k.lower(): v for k, v in request.headers.items()}
    if headers.get("content-type", "").startswith("application/cloudevents+json"):
        envelope = json.loads(request.body)
        data = envelope.pop("data", None)
        return {str(k): str(v) for k, v in envelope.items()}, data
    attributes = {k[3:]: v for k, v in headers.items() if k.startswith("ce-")}
    data = json.loads(request.body) if request.body else None
    return attributes, data if isinstance(data, dict) else None


def first_added(events: Iterable[RecordedRequest], kinds: Iterable[str]) -> list[Obj]:
    """The objects of ``kinds`` as their first add event carries them, stripped of what the
    API server assigns: what a user applied, to be created again before a replay."""
    wanted = set(kinds)
    found: dict[tuple[str, str, str], Obj] = {}
    for request in events:
        attributes, data = event_of(request)
        if not attributes.get("type", "").endswith(".add") or not data:
            continue
        if data.get("kind") not in wanted:
            continue
        meta = data.get("metadata") or {}
        ident = (str(data["kind"]), str(meta.get("namespace", "")), str(meta.get("name")))
        if ident not in found:
            found[ident] = user_object(data)
    return list(found.values())


def user_object(obj: Mapping[str, Any]) -> Obj:
    meta = obj.get("metadata") or {}
    keep = {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if k in meta}
    annotations = {k: v for k, v in (keep.get("annotations") or {}).items()
                   if k != "kubectl.kubernetes.io/last-applied-configuration"}
    if annotations:
        keep["annotations"] = annotations
    else:
        keep.pop("annotations", None)
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": keep,
            "spec": copy.deepcopy(obj.get("spec") or {})}


def is_trainer_event(request: RecordedRequest) -> bool:
    """Events about the Trainer or the objects it manages (everything outside the jobs'
    namespace)."""
    attributes, data = event_of(request)
    if attributes.get("type") == "dev.knative.sources.ping":
        return False
    namespace = attributes.get("namespace")
    if namespace is None and data is not None:
        namespace = (data.get("metadata") or {}).get("namespace")
    return namespace != JOBS_NAMESPACE


def relocate(request: RecordedRequest, namespace: str) -> RecordedRequest:
    """The same event about the same object in another namespace (jobs' events only)."""
    old = f"/namespaces/{JOBS_NAMESPACE}/"
    headers = {}
    for key, value in request.headers.items():
        if key.lower() == "ce-namespace" and value == JOBS_NAMESPACE:
            value = namespace
        elif key.lower() in ("ce-subject", "ce-source"):
            value = value.replace(old, f"/namespaces/{namespace}/")
        headers[key] = value
    body = request.body
    if body:
        data = json.loads(body)
        _rename_namespace(data, namespace)
        body = json.dumps(data, separators=(",", ":")).encode()
    return RecordedRequest(headers=headers, body=body, method=request.method,
                           path=request.path, received=request.received)


def _rename_namespace(data: Any, namespace: str) -> None:
    if isinstance(data, dict):
        for key, value in data.items():
            if key == "namespace" and value == JOBS_NAMESPACE:
                data[key] = namespace
            else:
                _rename_namespace(value, namespace)
    elif isinstance(data, list):
        for item in data:
            _rename_namespace(item, namespace)


# -- the compared state ------------------------------------------------------------------------

VOLATILE_META = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields",
                 "selfLink", "deletionGracePeriodSeconds")
VOLATILE_KEYS = frozenset({"lastTransitionTime", "lastUpdateTime", "lastProbeTime",
                           "startTime", "completionTime", "lastReconcileTime", "nodeName",
                           "clusterIP", "clusterIPs", "uid", "resourceVersion",
                           "controller-uid", "batch.kubernetes.io/controller-uid"})


def _scrub(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in sorted(value.items()) if k not in VOLATILE_KEYS}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value


def _conditions(obj: Obj) -> list[tuple[str, str, str]]:
    """The conditions, less a finished job's ``Running=False``: that entry exists only when a
    status pass saw the pods running before they finished, which records history (whether an
    event arrived during the short running phase), not a desired state. The Go operators
    behave alike: finishing flips an existing Running condition and adds none."""
    found = sorted((str(c.get("type")), str(c.get("status")), str(c.get("reason", "")))
                   for c in (obj.get("status") or {}).get("conditions") or [])
    if any(t in ("Succeeded", "Failed") and s == "True" for t, s, _ in found):
        found = [c for c in found if (c[0], c[1]) != ("Running", "False")]
    return found


def describe(obj: Obj) -> Obj:
    """What of one object must not depend on the event stream."""
    meta = obj.get("metadata") or {}
    owners = sorted(f"{o.get('kind')}/{o.get('name')}" for o in meta.get("ownerReferences") or [])
    described: Obj = {
        "labels": _scrub(meta.get("labels") or {}),
        "owners": owners,
        "finalizers": sorted(meta.get("finalizers") or []),
        "deleting": bool(meta.get("deletionTimestamp")),
        "conditions": _conditions(obj),
    }
    if obj.get("kind") == "Pod":
        described["phase"] = (obj.get("status") or {}).get("phase")
        spec = _scrub(obj.get("spec") or {})
        described["containers"] = [(c.get("name"), c.get("image"), c.get("env"))
                                   for c in spec.get("containers") or []]
    elif obj.get("kind") in ("Secret",):
        described["keys"] = sorted((obj.get("data") or {}).keys())
    elif obj.get("kind") == "ConfigMap":
        described["data"] = _scrub(obj.get("data") or {})
    else:
        described["spec"] = _scrub(obj.get("spec") or {})
    return described


def snapshot(kube: KubeClient, namespaces: Iterable[str],
             kinds: Iterable[Resource] = JOB_STATE_RESOURCES) -> dict[str, Obj]:
    """``"Kind namespace-relative-name" -> describe(obj)`` for every object of ``kinds`` in
    ``namespaces`` (namespace names are left out, so relocated runs compare equal)."""
    state: dict[str, Obj] = {}
    kinds = list(kinds)
    for namespace in namespaces:
        for res in kinds:
            for obj in kube.list(res, namespace):
                meta = obj["metadata"]
                if _ignored(obj):
                    continue
                name = (f"{meta['generateName']}*" if meta.get("generateName")
                        else meta["name"])
                described = json.dumps(describe(obj)).replace(namespace, "<namespace>")
                state[f"{res.kind} {name}"] = json.loads(described)
    return leave_out_cleanup_races(_freeze_finished_hostfiles(state))


def _finished(described: Obj) -> bool:
    return any(c[0] in ("Succeeded", "Failed") and c[1] == "True"
               for c in described.get("conditions") or [])


def _freeze_finished_hostfiles(state: dict[str, Obj]) -> dict[str, Obj]:
    """An MPIJob's hostfile lists the workers running when the job was last reconciled, and a
    finished job is never reconciled again (as in mpi-operator): its content records history
    (which worker changes an event reported before the launcher finished), not a desired
    state. Only its keys are compared once the job has finished."""
    for key, described in state.items():
        if not key.startswith("ConfigMap "):
            continue
        owners = [o for o in described["owners"] if o.startswith("MPIJob/")]
        if owners and _finished(state.get(f"MPIJob {owners[0].split('/', 1)[1]}", {})):
            described["data"] = sorted(described["data"])
    return state


def leave_out_cleanup_races(state: dict[str, Obj]) -> dict[str, Obj]:
    """Under ``cleanPodPolicy: Running`` a finished job keeps the pods that had finished and
    deletes, with their Services, those still running when it finished. A replica that ends
    within moments of the one that decides the job (kwok ends them all after the same delay)
    is kept or deleted depending on whether a pass saw the job finish before that replica
    did: timing, not the event stream, decides. So the finished pods of such a job and their
    Services are left out; a pod still running would remain, and is compared."""
    racing: set[str] = set()
    for key, described in state.items():
        kind, _, name = key.partition(" ")
        if kind != "Pod" or described.get("phase") not in ("Succeeded", "Failed"):
            continue
        for owner in described["owners"]:
            job = state.get(owner.replace("/", " ", 1), {})
            run_policy = (job.get("spec") or {}).get("runPolicy") or {}
            if _finished(job) and run_policy.get("cleanPodPolicy") == "Running":
                racing.add(name)
    return {key: described for key, described in state.items()
            if key.partition(" ")[0] not in ("Pod", "Service")
            or key.partition(" ")[2] not in racing}


def _ignored(obj: Obj) -> bool:
    """Objects the cluster itself puts in every namespace."""
    name = obj["metadata"]["name"]
    kind = obj.get("kind")
    if kind == "ConfigMap" and name in ("kube-root-ca.crt", "openshift-service-ca.crt"):
        return True
    if kind == "ServiceAccount" and name == "default":
        return True
    return kind == "Secret" and (obj.get("type") == "kubernetes.io/service-account-token")


def pod_names(kube: KubeClient, namespace: str) -> list[str]:
    return sorted(p["metadata"]["name"] for p in kube.list(resources.PODS, namespace))


def apply_all(kube: KubeClient, objects: Iterable[Obj]) -> None:
    for obj in objects:
        kube.apply(copy.deepcopy(obj), FIELD_MANAGER)


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


REPLICA_LABELS = ("training.kubeflow.org/job-name", "training.kubeflow.org/replica-type",
                  "training.kubeflow.org/replica-index")


def duplicate_pods(kube: KubeClient, namespace: str) -> dict[tuple[str, ...], list[str]]:
    """Live pods that play the same replica of the same job (there must be none)."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for pod in kube.list(resources.PODS, namespace):
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        if meta.get("deletionTimestamp") or not all(k in labels for k in REPLICA_LABELS):
            continue
        groups.setdefault(tuple(labels[k] for k in REPLICA_LABELS), []).append(meta["name"])
    return {replica: names for replica, names in groups.items() if len(names) > 1}


def create_namespace(kube: KubeClient, name: str) -> None:
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
               FIELD_MANAGER)


def differences(actual: Mapping[str, Any], expected: Mapping[str, Any]) -> list[str]:
    """Readable differences between two snapshots (empty when equal)."""
    found: list[str] = []
    for key in sorted(set(actual) | set(expected)):
        if key not in actual:
            found.append(f"missing {key}")
        elif key not in expected:
            found.append(f"extra {key}: {actual[key]}")
        elif actual[key] != expected[key]:
            if isinstance(actual[key], Mapping) and isinstance(expected[key], Mapping):
                found.extend(f"{key}: {d}" for d in differences(actual[key], expected[key]))
            else:
                found.append(f"{key}: {actual[key]!r} != {expected[key]!r}")
    return found

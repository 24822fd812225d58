"""Hypothesis strategies for the fuzz suites: CloudEvents (fully random, and the captured
samples in ``tests/data/cloudevents`` mutated) and training-job CRs (the samples with
fields replaced by plausible and implausible values).
"""

from __future__ import annotations

import copy
import json
import string
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

from functions.jobs.core.frameworks import FRAMEWORKS
from tests.support import CLOUDEVENTS, REPO

Obj = dict[str, Any]
SAMPLES = CLOUDEVENTS
TRANSPORT_HEADERS = {"host", "content-length", "accept-encoding", "user-agent"}
HEADER_TEXT = st.text(string.printable.strip() + " éü", max_size=40)
EVENT_TYPES = ("dev.knative.apiserver.resource.add", "dev.knative.apiserver.resource.update",
               "dev.knative.apiserver.resource.delete", "dev.knative.apiserver.ref.add",
               "dev.knative.apiserver.ref.update", "dev.knative.apiserver.ref.delete",
               "dev.knative.sources.ping", "com.example.unknown")
CONTENT_TYPES = ("application/json", "application/cloudevents+json", "text/plain",
                 "application/cloudevents-batch+json", "application/json; charset=utf-8",
                 "application/octet-stream", "")
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False)
    | HEADER_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(HEADER_TEXT, inner, max_size=4),
    max_leaves=12)


@dataclass(frozen=True)
class HttpEvent:
    headers: dict[str, str]
    body: bytes

    def __repr__(self) -> str:  # hypothesis prints failing examples
        return f"HttpEvent(headers={self.headers!r}, body={self.body[:300]!r})"


@dataclass(frozen=True)
class Sample:
    name: str
    headers: dict[str, str]
    body: Any  # parsed JSON: the data (binary mode) or the whole envelope (structured)
    structured: bool


def load_samples(directory: Path = SAMPLES) -> list[Sample]:
    found: list[Sample] = []
    for path in sorted(directory.glob("*.json")):
        data = json.loads(path.read_text())
        if "headers" in data:
            headers = {k: str(v) for k, v in data["headers"].items()
                       if k.lower() not in TRANSPORT_HEADERS}
            found.append(Sample(path.name, headers, data["body"], False))
        else:
            found.append(Sample(path.name, {"Content-Type": "application/cloudevents+json"},
                                data, True))
    return found


def encode(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found.extend(_paths(item, (*prefix, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.extend(_paths(item, (*prefix, index)))
    return found


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    value = copy.deepcopy(value)
    target = value
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = new
    return value


@st.composite
def mutated_sample(draw: st.DrawFn, samples: list[Sample]) -> HttpEvent:
    """A captured event with one to three things broken or changed."""
    sample = draw(st.sampled_from(samples))
    headers = dict(sample.headers)
    body: Any = copy.deepcopy(sample.body)
    raw: bytes | None = None
    for _ in range(draw(st.integers(1, 3))):
        operation = draw(st.sampled_from((
            "drop-attribute", "set-attribute", "type", "replace-value", "content-type",
            "not-an-object", "truncate", "flip-bytes", "nest")))
        attributes = body if sample.structured and isinstance(body, dict) else headers
        if operation == "drop-attribute" and attributes:
            attributes.pop(draw(st.sampled_from(sorted(attributes))), None)
        elif operation == "set-attribute" and attributes:
            attributes[draw(st.sampled_from(sorted(attributes)))] = draw(HEADER_TEXT)
        elif operation == "type":
            key = "type" if attributes is body else "Ce-Type"
            attributes[key] = draw(st.sampled_from(EVENT_TYPES) | HEADER_TEXT)
        elif operation == "replace-value":
            path = draw(st.sampled_from(_paths(body)))
            body = _replace(body, path, draw(JSON))
        elif operation == "content-type":
            headers["Content-Type"] = draw(st.sampled_from(CONTENT_TYPES) | HEADER_TEXT)
        elif operation == "not-an-object":
            body = draw(JSON.filter(lambda v: not isinstance(v, dict)))
        elif operation == "truncate":
            raw = (raw if raw is not None else encode(body))
            raw = raw[:draw(st.integers(0, max(0, len(raw) - 1)))]
        elif operation == "flip-bytes":
            data = bytearray(raw if raw is not None else encode(body))
            for _ in range(draw(st.integers(1, 8))):
                if data:
                    data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
            raw = bytes(data)
        elif operation == "nest":
            raw = nest(raw if raw is not None else encode(body), draw(NESTING), draw(OPENINGS))
    return HttpEvent(headers, raw if raw is not None else encode(body))


NESTING = st.integers(1, 60_000)
OPENINGS = st.sampled_from((b"[", b'{"a":'))


def nest(document: bytes, depth: int, opening: bytes) -> bytes:
    """``document`` wrapped ``depth`` levels deep, closed or (half of the time) not."""
    closing = b"]" if opening == b"[" else b"}"
    return opening * depth + document + (closing * depth if depth % 2 else b"")


@st.composite
def random_event(draw: st.DrawFn) -> HttpEvent:
    """Headers that look like CloudEvent attributes with random values, and random bytes."""
    names = st.sampled_from(("Ce-Specversion", "Ce-Type", "Ce-Source", "Ce-Id", "Ce-Kind",
                             "Ce-Name", "Ce-Namespace", "Ce-Apiversion", "Ce-Subject",
                             "Content-Type")) | HEADER_TEXT.filter(
                                 lambda s: s.isalnum() and s.isascii())
    headers = draw(st.dictionaries(names, HEADER_TEXT, max_size=10))
    body = draw(st.binary(max_size=512) | JSON.map(encode)
                | st.builds(nest, st.just(b""), NESTING, OPENINGS))
    return HttpEvent(headers, body)


def events(samples: list[Sample]) -> st.SearchStrategy[HttpEvent]:
    return mutated_sample(samples) | random_event()


# -- training-job CRs -------------------------------------------------------------------------

JOB_SAMPLES = {fw.kind: REPO / "config" / "samples" / f"{fw.kind.lower()}.yaml"
               for fw in FRAMEWORKS}
SPEC_FIELDS = {fw.kind: fw.specs_field for fw in FRAMEWORKS}
REPLICA_TYPES = ("Master", "Worker", "PS", "Chief", "Evaluator", "Launcher", "Scheduler",
                 "Server", "TunerTracker", "master", "worker", "Bogus")
RESTART_POLICIES = ("Always", "OnFailure", "Never", "ExitCode", "Sometimes", "")
CLEAN_POD_POLICIES = ("All", "Running", "None", "Some")
SMALL_INT = st.integers(-3, 4)
ODD = st.none() | SMALL_INT | HEADER_TEXT | st.booleans()


def job_sample(kind: str) -> Obj:
    data = yaml.safe_load(JOB_SAMPLES[kind].read_text())
    assert isinstance(data, dict)
    return data


def _object_at(obj: Obj, *keys: str) -> Obj | None:
    """The object at ``keys`` under ``obj``, made where a key is missing; ``None`` where an
    earlier operation left something else there (a ``null`` template, a string spec): that
    odd shape is itself an input worth sending, so the operation leaves it as it is."""
    current: Any = obj
    for key in keys:
        current = current.setdefault(key, {})
        if not isinstance(current, dict):
            return None
    return current if isinstance(current, dict) else None


# What a composite strategy's ``draw`` and ``st.data().draw`` both are.
Draw = Callable[[st.SearchStrategy[Any]], Any]
JOB_OPERATIONS = ("replicas", "restart", "rename-type", "drop-containers", "container-image",
                  "run-policy", "extra-replica", "elastic", "mpi", "odd-value")


def mutate_job(draw: Draw, job: Obj, operation: str) -> None:
    """Apply one of :data:`JOB_OPERATIONS` to ``job`` in place. Whatever shape earlier
    operations left (a ``null`` template, a string where a list was) is input too: an
    operation that cannot apply to it leaves it as it is."""
    kind = job["kind"]
    spec: Obj = job["spec"]
    found_specs = spec.get(SPEC_FIELDS[kind])
    specs: Obj = found_specs if isinstance(found_specs, dict) else {}
    rtype = draw(st.sampled_from(sorted(specs))) if specs else None
    found = specs.get(rtype) if rtype else None
    replica: Obj = found if isinstance(found, dict) else {}
    if operation == "replicas" and rtype:
        replica["replicas"] = draw(SMALL_INT | st.none())
    elif operation == "restart" and rtype:
        replica["restartPolicy"] = draw(st.sampled_from(RESTART_POLICIES))
    elif operation == "rename-type" and rtype:
        specs[draw(st.sampled_from(REPLICA_TYPES))] = specs.pop(rtype)
    elif operation == "drop-containers" and rtype:
        pod = _object_at(replica, "template", "spec")
        if pod is not None:
            pod["containers"] = []
    elif operation == "container-image" and rtype:
        pod = _object_at(replica, "template", "spec")
        containers = pod.get("containers") if pod is not None else None
        for container in containers if isinstance(containers, list) else ():
            if isinstance(container, dict):
                container["image"] = draw(HEADER_TEXT)
    elif operation == "run-policy":
        field = draw(st.sampled_from(("cleanPodPolicy", "backoffLimit", "activeDeadlineSeconds",
                                      "ttlSecondsAfterFinished", "suspend")))
        value = draw(st.sampled_from(CLEAN_POD_POLICIES) if field == "cleanPodPolicy" else ODD)
        policy = _object_at(spec, "runPolicy")
        if policy is not None:
            policy[field] = value
    elif operation == "extra-replica" and found_specs is specs:
        specs[draw(st.sampled_from(REPLICA_TYPES))] = copy.deepcopy(
            next(iter(specs.values()), {}))
    elif operation == "elastic" and kind in ("PyTorchJob", "PaddleJob"):
        spec["elasticPolicy"] = {"minReplicas": draw(SMALL_INT), "maxReplicas": draw(SMALL_INT),
                                 "nProcPerNode": draw(SMALL_INT)}
    elif operation == "mpi" and kind == "MPIJob":
        spec[draw(st.sampled_from(("slotsPerWorker", "launcherCreationPolicy",
                                   "mpiImplementation", "runLauncherAsWorker")))] = draw(ODD)
    elif operation == "odd-value" and _paths(spec)[1:]:
        path = draw(st.sampled_from(_paths(spec)[1:]))
        job["spec"] = _replace(spec, path, draw(ODD))


@st.composite
def job_spec(draw: st.DrawFn) -> Obj:
    """A job CR from a sample with a few fields set to odd values (name and namespace left
    to the caller)."""
    job = job_sample(draw(st.sampled_from(sorted(JOB_SAMPLES))))
    for _ in range(draw(st.integers(1, 4))):
        mutate_job(draw, job, draw(st.sampled_from(JOB_OPERATIONS)))
    return job

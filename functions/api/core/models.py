"""The wire models of the training API: what a platform sends and what it gets back.

The request is platform-neutral (no pod templates, no replica specs): a name, a framework, an
image and a handful of knobs a training platform already has. Every constraint lives here, so
validation, the 4xx answers and the OpenAPI document come from one place. Responses are read
from the CRs; nothing in them is stored anywhere else.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator
from pydantic.alias_generators import to_camel

from functions.jobs.core.frameworks import FRAMEWORKS as JOB_FRAMEWORKS
from functions.jobs.core.frameworks import Framework

FrameworkName = Literal["pytorch", "tensorflow", "mpi", "mxnet", "xgboost", "paddle", "jax"]
# Request names are upstream's framework names (the ``framework`` label of its metrics).
FRAMEWORKS: dict[str, Framework] = {fw.name: fw for fw in JOB_FRAMEWORKS}
TRAINJOB = "trainjob"
# The job kind each ``framework`` value creates (a TrainJob's framework is its runtime's).
KIND_BY_FRAMEWORK: dict[str, str] = {
    **{name: fw.kind for name, fw in FRAMEWORKS.items()}, TRAINJOB: "TrainJob"}
NAME_BY_KIND: dict[str, str] = {kind: name for name, kind in KIND_BY_FRAMEWORK.items()}

Admission = Literal["queue", "kueue", "none"]
State = Literal["Queued", "Suspended", "Pending", "Running", "Restarting", "Succeeded",
                "Failed"]
STATES: tuple[str, ...] = ("Queued", "Suspended", "Pending", "Running", "Restarting",
                           "Succeeded", "Failed")

# Label keys this service owns; callers may not set them through ``labels``.
RESERVED_LABEL_DOMAINS = ("training.opendatahub.io", "training.kubeflow.org", "kueue.x-k8s.io",
                          "kubernetes.io", "k8s.io")

# A job name becomes pod names (``<name>-worker-<i>``) and Service names (DNS-1035 labels).
JobName = Annotated[str, StringConstraints(min_length=1, max_length=40,
                                           pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$")]
Quantity = Annotated[str, StringConstraints(
    max_length=24, pattern=r"^[0-9]{1,12}(\.[0-9]{1,6})?(m|k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?$")]
Argument = Annotated[str, StringConstraints(max_length=4096)]
EnvName = Annotated[str, StringConstraints(min_length=1, max_length=128,
                                           pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
EnvValue = Annotated[str, StringConstraints(max_length=4096)]
LabelKey = Annotated[str, StringConstraints(
    min_length=1, max_length=120,
    pattern=r"^([a-z0-9]([-a-z0-9.]{0,50}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")]
LabelValue = Annotated[str, StringConstraints(
    max_length=63, pattern=r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")]
QueueName = Annotated[str, StringConstraints(
    min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$")]
RuntimeName = Annotated[str, StringConstraints(
    min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")]


class _Wire(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class ResourceRequest(_Wire):
    """What each worker (each node of a TrainJob) asks for; GPUs are ``nvidia.com/gpu``."""

    model_config = ConfigDict(extra="forbid", title="Resources")

    cpu: Quantity | None = Field(default=None, description="CPU per worker, e.g. 500m or 2")
    memory: Quantity | None = Field(default=None, description="memory per worker, e.g. 4Gi")
    gpus: int = Field(default=0, ge=0, le=64, description="GPUs per worker")


class _JobFields(_Wire):
    """What every job request has, whatever kind of job it creates."""

    name: JobName = Field(description="job name, unique in the namespace")
    image: str = Field(min_length=1, max_length=512, pattern=r"^[^\s]+$",
                       description="container image of every replica")
    command: list[Argument] = Field(default_factory=list, max_length=64)
    args: list[Argument] = Field(default_factory=list, max_length=256)
    env: dict[EnvName, EnvValue] = Field(default_factory=dict, max_length=64)
    resources: ResourceRequest = Field(default_factory=lambda: ResourceRequest())
    priority: int = Field(default=0, ge=-1000, le=1000, description=(
        "higher is admitted first; FIFO among equals. Above 0 only up to the maximum the "
        "platform allows in the namespace (ConfigMap odh-training-queue-policy; 403 above)"))
    queue: QueueName | None = Field(default=None, description=(
        "queue name; with Kueue installed the job is left to that LocalQueue"))
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=16, description=(
        "extra labels for the job and its pods (a TrainJob's trainer nodes)"))

    @field_validator("labels")
    @classmethod
    def _no_reserved_labels(cls, labels: dict[str, str]) -> dict[str, str]:
        for key in labels:
            if reserved_label(key):
                raise ValueError(f"label {key!r} uses a prefix this service manages")
        return labels


class JobRequest(_JobFields):
    """A Kubeflow v1 training job (PyTorchJob, TFJob, MPIJob, MXJob) as a platform
    describes it."""

    model_config = ConfigDict(extra="forbid", title="JobRequest")

    framework: FrameworkName
    workers: int = Field(default=1, ge=1, le=256, description=(
        "number of training processes: PyTorch master + workers, TF/MXNet/MPI workers"))


class TrainJobRequest(_JobFields):
    """A Kubeflow Trainer v2 TrainJob on a ClusterTrainingRuntime: chosen by ``framework:
    trainjob``, or by giving ``runtime`` without a framework."""

    model_config = ConfigDict(extra="forbid", title="TrainJobRequest")

    framework: Literal["trainjob"] = "trainjob"
    runtime: RuntimeName = Field(description=(
        "name of the ClusterTrainingRuntime to run on, e.g. torch-distributed"))
    num_nodes: int = Field(default=1, ge=1, le=256, description="number of training nodes")


AnyJobRequest = JobRequest | TrainJobRequest


def request_model(data: object) -> type[JobRequest] | type[TrainJobRequest]:
    """The model a request body is read with: a TrainJob for ``framework: trainjob``, or a
    ``runtime`` without a framework; a v1 job otherwise."""
    if isinstance(data, dict) and (data.get("framework") == TRAINJOB or (
            "framework" not in data and "runtime" in data)):
        return TrainJobRequest
    return JobRequest


def parse_request(data: object) -> AnyJobRequest:
    """The request in ``data`` (raises pydantic's ``ValidationError``)."""
    return request_model(data).model_validate(data)


def reserved_label(key: str) -> bool:
    """Whether ``key``'s prefix is one of the domains this service or Kubernetes manages."""
    prefix, slash, _ = key.partition("/")
    if not slash:
        return False
    return any(prefix == domain or prefix.endswith("." + domain)
               for domain in RESERVED_LABEL_DOMAINS)


class ConditionView(_Wire):
    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None


class ReplicaCounts(_Wire):
    desired: int = 0
    active: int = 0
    succeeded: int = 0
    failed: int = 0


class QueueView(_Wire):
    """Where the job stands in the queue; ``admission`` says who admits it."""

    name: str | None = None
    priority: int = 0
    position: int | None = Field(
        default=None, description="1-based, among queued jobs of the namespace")
    submitted_at: str | None = None
    admitted_at: str | None = None
    admission: Admission = "none"


class JobView(_Wire):
    model_config = ConfigDict(title="Job")

    name: str
    namespace: str
    framework: str
    kind: str
    state: State
    conditions: list[ConditionView] = Field(default_factory=list)
    replicas: dict[str, ReplicaCounts] = Field(default_factory=dict)
    created_at: str | None = None
    start_time: str | None = None
    completion_time: str | None = None
    queue: QueueView = Field(default_factory=lambda: QueueView())
    labels: dict[str, str] = Field(default_factory=dict)


class JobList(_Wire):
    model_config = ConfigDict(title="JobList")

    items: list[JobView]
    continue_: str | None = Field(default=None, alias="continue",
                                  description="pass as ?continue= for the next page")


class EventView(_Wire):
    type: str = ""
    reason: str = ""
    message: str = ""
    count: int = 1
    first_timestamp: str | None = None
    last_timestamp: str | None = None


class EventList(_Wire):
    model_config = ConfigDict(title="EventList")

    items: list[EventView]


class FieldError(_Wire):
    field: str = Field(description="dotted path of the offending field, e.g. resources.gpus")
    message: str
    type: str = ""


class Problem(_Wire):
    """RFC 9457 problem details, with field-level errors for invalid requests."""

    model_config = ConfigDict(title="Problem")

    type: str = "about:blank"
    title: str
    status: int
    detail: str = ""
    errors: list[FieldError] = Field(default_factory=list)

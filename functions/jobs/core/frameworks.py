"""What differs between the training-job kinds, in one table.

Every rule elsewhere (naming, defaults, env vars, status) asks a :class:`Framework` instead of
switching on the kind, so the kinds share one code path and differ only in data; what is truly
specific to a kind (its environment variables, its success rule) is looked up by kind in the
module that owns that rule.
"""

from __future__ import annotations

from dataclasses import dataclass

GROUP = "kubeflow.org"
V1 = f"{GROUP}/v1"
V2BETA1 = f"{GROUP}/v2beta1"

# Label keys shared by every kind.
LABEL_OPERATOR = "training.kubeflow.org/operator-name"
LABEL_JOB_NAME = "training.kubeflow.org/job-name"
LABEL_REPLICA_TYPE = "training.kubeflow.org/replica-type"
LABEL_REPLICA_INDEX = "training.kubeflow.org/replica-index"
LABEL_JOB_ROLE = "training.kubeflow.org/job-role"

# runPolicy.managedBy values.
MANAGED_BY_TRAINING_OPERATOR = "kubeflow.org/training-operator"
MANAGED_BY_MPI_OPERATOR = "kubeflow.org/mpi-operator"
MANAGED_BY_MULTIKUEUE = "kueue.x-k8s.io/multikueue"


@dataclass(frozen=True, slots=True)
class Framework:
    """The per-kind constants of one training-job API."""

    kind: str
    name: str                             # upstream's framework name (metrics, training API)
    api_version: str
    plural: str
    specs_field: str                      # e.g. ``pytorchReplicaSpecs``
    replica_types: tuple[str, ...]        # canonical names, in status-evaluation order
    default_container: str
    port_name: str
    port: int
    default_restart_policy: str
    operator_name: str
    own_manager: str                      # the managedBy value that means "us"
    scale_selector: bool = False          # replicaStatuses.<type>.selector is published
    restricted_types: bool = True         # replica types outside ``replica_types`` are invalid
    job_deleted_reason: str = "SuccessfulDeleteJob"  # the Event when the TTL deletes the job
    # Which pods get ``job-role: master``: those of the first of ``master_types`` present in
    # the job, else (``worker0_master``) the pod of Worker 0.
    master_types: tuple[str, ...] = ()
    worker0_master: bool = False

    def canonical_type(self, name: str) -> str:
        """Replica-type keys are matched case-insensitively and stored in canonical case."""
        for known in self.replica_types:
            if known.lower() == name.lower():
                return known
        return name

    def reason(self, suffix: str) -> str:
        """Condition and Event reasons are ``<Kind><Suffix>`` (e.g. ``PyTorchJobRunning``)."""
        return f"{self.kind}{suffix}"

    def restart_policy_for(self, replica_type: str) -> str:
        # mpi-operator's launcher is a batch Job that retries; training-operator's is a pod.
        if self.api_version == V2BETA1 and replica_type == "Launcher":
            return "OnFailure"
        return self.default_restart_policy

    def default_replicas_for(self, replica_type: str) -> int:
        if self.kind == "MPIJob" and replica_type == "Worker":
            return 0
        return 1


PYTORCH = Framework(
    kind="PyTorchJob", name="pytorch", api_version=V1, plural="pytorchjobs",
    specs_field="pytorchReplicaSpecs",
    replica_types=("Master", "Worker"), default_container="pytorch",
    port_name="pytorchjob-port", port=23456, default_restart_policy="OnFailure",
    operator_name="pytorchjob-controller", own_manager=MANAGED_BY_TRAINING_OPERATOR,
    scale_selector=True, job_deleted_reason="SuccessfulDeletePod",  # upstream's wording
    master_types=("Master",), worker0_master=True,
)
TENSORFLOW = Framework(
    kind="TFJob", name="tensorflow", api_version=V1, plural="tfjobs",
    specs_field="tfReplicaSpecs",
    replica_types=("Chief", "Evaluator", "Master", "PS", "Worker"),
    default_container="tensorflow", port_name="tfjob-port", port=2222,
    default_restart_policy="Never", operator_name="tfjob-controller",
    own_manager=MANAGED_BY_TRAINING_OPERATOR, restricted_types=False,
    master_types=("Chief", "Master"), worker0_master=True,
)
MXNET = Framework(
    kind="MXJob", name="mxnet", api_version=V1, plural="mxjobs",
    specs_field="mxReplicaSpecs",
    replica_types=("Scheduler", "Server", "Worker", "TunerTracker", "TunerServer", "Tuner"),
    default_container="mxnet", port_name="mxjob-port", port=9091,
    default_restart_policy="Never", operator_name="mxjob-controller",
    own_manager=MANAGED_BY_TRAINING_OPERATOR, master_types=("Server",),
)
MPI = Framework(
    kind="MPIJob", name="mpi", api_version=V2BETA1, plural="mpijobs",
    specs_field="mpiReplicaSpecs",
    replica_types=("Launcher", "Worker"), default_container="mpi",
    port_name="mpi-port", port=9999, default_restart_policy="Never",
    operator_name="mpi-operator", own_manager=MANAGED_BY_MPI_OPERATOR,
)
# MPIJob as training-operator 1.9 served it (``kubeflow.org/v1``): a launcher pod that reaches
# the workers with ``kubectl exec``, no Services. The same CRD serves both versions from one
# storage, so this is not a kind of its own: each MPIJob is one flavour or the other, by the
# API version its spec was written through (:mod:`functions.jobs.core.flavour`).
MPI_V1 = Framework(
    kind="MPIJob", name="mpi", api_version=V1, plural="mpijobs",
    specs_field="mpiReplicaSpecs",
    replica_types=("Launcher", "Worker"), default_container="mpi",
    port_name="mpi-port", port=9999, default_restart_policy="Never",
    operator_name="mpijob-controller", own_manager=MANAGED_BY_TRAINING_OPERATOR,
    master_types=("Launcher",),
)

XGBOOST = Framework(
    kind="XGBoostJob", name="xgboost", api_version=V1, plural="xgboostjobs",
    specs_field="xgbReplicaSpecs", replica_types=("Master", "Worker"),
    default_container="xgboost", port_name="xgboostjob-port", port=9999,
    default_restart_policy="Never", operator_name="xgboostjob-controller",
    own_manager=MANAGED_BY_TRAINING_OPERATOR, master_types=("Master",),
)
PADDLE = Framework(
    kind="PaddleJob", name="paddle", api_version=V1, plural="paddlejobs",
    specs_field="paddleReplicaSpecs", replica_types=("Master", "Worker"),
    default_container="paddle", port_name="master", port=36543,
    default_restart_policy="OnFailure", operator_name="paddlejob-controller",
    own_manager=MANAGED_BY_TRAINING_OPERATOR, scale_selector=True,
    job_deleted_reason="SuccessfulDeletePod", master_types=("Master",),
)
JAX = Framework(
    kind="JAXJob", name="jax", api_version=V1, plural="jaxjobs",
    specs_field="jaxReplicaSpecs", replica_types=("Worker",),
    default_container="jax", port_name="jaxjob-port", port=6666,
    default_restart_policy="Never", operator_name="jaxjob-controller",
    own_manager=MANAGED_BY_TRAINING_OPERATOR, scale_selector=True,
    job_deleted_reason="SuccessfulDeletePod", worker0_master=True,
)

FRAMEWORKS: tuple[Framework, ...] = (PYTORCH, TENSORFLOW, MXNET, MPI, XGBOOST, PADDLE, JAX)
BY_KIND: dict[str, Framework] = {f.kind: f for f in FRAMEWORKS}
# Every flavour of a kind, the one in FRAMEWORKS (whose controller serves them all) first.
FLAVOURS: dict[str, tuple[Framework, ...]] = {
    **{f.kind: (f,) for f in FRAMEWORKS}, MPI.kind: (MPI, MPI_V1)}


def allowed_managers(framework: Framework) -> tuple[str, ...]:
    """The ``runPolicy.managedBy`` values admission accepts for a kind."""
    return (framework.own_manager, MANAGED_BY_MULTIKUEUE)

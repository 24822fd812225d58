"""Write the training-job CRDs (config/crd/*.kubeflow.org.yaml) from one description, and
the admission policy of the guards' annotations (config/crd/guards-policy.yaml).

The kinds share most of their schema (replica specs, run policy, status); writing them from
one place keeps their docs and validation rules identical. Validation replaces the upstream
admission webhooks with CEL rules, so no webhook server is needed. A CRD's CEL rules cannot
see ``metadata.annotations``, so the annotations a job (or a TrainJob, or a namespace) opts
into guards with are checked by a ValidatingAdmissionPolicy of their own, built from the
patterns the controllers parse them with (:mod:`functions.jobs.core.guards`,
:mod:`functions.jobs.core.hygiene`). Run: ``python hack/gen_job_crds.py`` (``--check`` exits 1
when the files are out of date).
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from functions.jobs.core import guards, hygiene  # noqa: E402 - needs ROOT on the path
from functions.jobs.core.frameworks import (  # noqa: E402 - needs ROOT on the path
    FRAMEWORKS,
    JAX,
    MPI,
    MPI_V1,
    MXNET,
    PADDLE,
    PYTORCH,
    TENSORFLOW,
    XGBOOST,
    Framework,
    allowed_managers,
)
from hack.job_crd_schema import (  # noqa: E402 - needs ROOT on the path
    Schema,
    crd,
    obj,
    one_replica,
    replica_map,
    rule,
    run_policy,
    s,
)

OUT = ROOT / "config" / "crd"

def managers(framework: Framework) -> list[str]:
    return list(allowed_managers(framework))


def worker_scale(framework: Framework) -> dict[str, str]:
    """The scale subresource over the Worker replicas (what an HPA or ``kubectl scale``
    changes), for the kinds upstream serves it for."""
    return {"specReplicasPath": f".spec.{framework.specs_field}.Worker.replicas",
            "statusReplicasPath": ".status.replicaStatuses.Worker.active",
            "labelSelectorPath": ".status.replicaStatuses.Worker.selector"}


def metrics_schema() -> Schema:
    return {"type": "array", "description": "autoscaling/v2 MetricSpecs; when set a "
                                            "HorizontalPodAutoscaler scales Workers.",
            "items": {"type": "object", "description": "One autoscaling/v2 MetricSpec.",
                      "x-kubernetes-preserve-unknown-fields": True}}


def pytorch() -> dict[str, Any]:
    types = list(PYTORCH.replica_types)
    elastic = obj("Elastic training with torchrun rendezvous; needs a Worker replica.", {
        "minReplicas": s("integer", "Lower bound of Worker replicas.", format="int32"),
        "maxReplicas": s("integer", "Upper bound of Worker replicas.", format="int32"),
        "rdzvBackend": s("string", "Rendezvous backend.", enum=["c10d", "etcd", "etcd-v2"]),
        "rdzvPort": s("integer", "Rendezvous port.", format="int32"),
        "rdzvHost": s("string", "Rendezvous host (default <job>-worker-0)."),
        "rdzvId": s("string", "Rendezvous id."),
        "rdzvConf": {"type": "array", "description": "Extra rendezvous settings.",
                     "items": obj("One key=value setting.", {
                         "key": s("string", "Setting name."),
                         "value": s("string", "Setting value.")})},
        "standalone": s("boolean", "Run a standalone rendezvous."),
        "nProcPerNode": s("integer", "Deprecated: use spec.nprocPerNode.", format="int32"),
        "maxRestarts": s("integer", "torchrun --max-restarts.", format="int32"),
        "metrics": metrics_schema(),
    })
    spec = obj("Desired state of the PyTorchJob.", {
        "pytorchReplicaSpecs": replica_map(PYTORCH.kind, types, PYTORCH.default_container,
                                           PYTORCH.default_restart_policy, [
            one_replica("master", "Master replicas must be set to 1", required=True),
            rule("self.all(k, k.lowerAscii() != 'worker' || !has(self[k].replicas) || "
                 "self[k].replicas >= 1)", "Worker replicas must be at least 1 when set")]),
        "runPolicy": run_policy(managers(PYTORCH)),
        "elasticPolicy": elastic,
        "nprocPerNode": s("string", "Processes per node: auto, cpu, gpu or a number "
                                    "(default auto)."),
    }, required=["pytorchReplicaSpecs"], **{"x-kubernetes-validations": [
        rule("!has(self.elasticPolicy) || self.pytorchReplicaSpecs.exists(k, "
             "k.lowerAscii() == 'worker')",
             "spec.elasticPolicy needs a Worker replica spec"),
        rule("!(has(self.elasticPolicy) && has(self.elasticPolicy.nProcPerNode) && "
             "has(self.nprocPerNode))",
             "set spec.nprocPerNode only; spec.elasticPolicy.nProcPerNode is deprecated and "
             "cannot be combined with it"),
    ]})
    return crd("PyTorchJob", "pytorchjobs", "v1", spec, worker_scale(PYTORCH),
               "PyTorchJob runs distributed PyTorch training: one Master and/or Workers.")


def tensorflow() -> dict[str, Any]:
    types = list(TENSORFLOW.replica_types)
    replicas = replica_map(TENSORFLOW.kind, types, TENSORFLOW.default_container,
                           TENSORFLOW.default_restart_policy, [
        rule("size(self.filter(k, k.lowerAscii() in ['chief', 'master'])) <= 1",
             "must not have more than 1 Chief or Master role: use either Chief or Master"),
        one_replica("chief", "Chief replicas must be at most 1", required=False),
        one_replica("master", "Master replicas must be at most 1", required=False),
    ])
    replicas["x-kubernetes-validations"] = replicas["x-kubernetes-validations"][1:]
    spec = obj("Desired state of the TFJob.", {
        "tfReplicaSpecs": replicas,
        "runPolicy": run_policy(managers(TENSORFLOW)),
        "successPolicy": s("string", "\"\" (default): the job succeeds with the Chief/Master "
                                     "or worker 0; AllWorkers: when every worker succeeded.",
                           enum=["", "AllWorkers"]),
        "enableDynamicWorker": s("boolean", "Sparse TF_CONFIG; worker failures do not fail "
                                            "the job."),
    }, required=["tfReplicaSpecs"])
    return crd("TFJob", "tfjobs", "v1", spec, None,
               "TFJob runs distributed TensorFlow training (Chief, PS, Worker, Evaluator).")


def mxnet() -> dict[str, Any]:
    types = list(MXNET.replica_types)
    spec = obj("Desired state of the MXJob.", {
        "mxReplicaSpecs": replica_map(MXNET.kind, types, MXNET.default_container,
                                      MXNET.default_restart_policy, [
            one_replica("scheduler", "Scheduler replicas must be at most 1", required=False)]),
        "runPolicy": run_policy(managers(MXNET)),
        "jobMode": s("string", "MXTrain (Scheduler/Server/Worker) or MXTune "
                               "(TunerTracker/TunerServer/Tuner).", enum=["MXTrain", "MXTune"]),
    }, required=["mxReplicaSpecs"])
    return crd("MXJob", "mxjobs", "v1", spec, None,
               "MXJob runs distributed Apache MXNet training or tuning.")


def mpi() -> dict[str, Any]:
    """MPIJob, served as ``v2beta1`` (mpi-operator, the storage version) and ``v1``
    (training-operator 1.9, which the Kubeflow Training SDK always uses for MPIJobs).

    One storage and ``conversion: None``: an object reads the same through either version.
    The API server prunes by the schema of the version a request names, so both versions
    carry ONE schema, the union of both APIs' fields; with per-version schemas a field only
    one version knows (``mainContainer``, ``cleanPodPolicy``, ``sshAuthMountPath``) would be
    dropped on the way through the other. Which semantics a job gets is not in the schema but
    in how it was written (:mod:`functions.jobs.core.flavour`). ``v2beta1`` stays the storage
    version, so the objects stored before ``v1`` was served stay as they are.
    """
    types = list(MPI.replica_types)
    spec = obj("Desired state of the MPIJob (the fields of both versions; each flavour reads "
               "its own).", {
        "mpiReplicaSpecs": replica_map(MPI.kind, types, None,
                                       "v2beta1: Launcher OnFailure, Worker Never; v1: Never",
                                       [rule("self.exists(k, k.lowerAscii() == 'launcher')",
                                             "an MPIJob needs a Launcher replica spec"),
                                        # both operators: one launcher (1 when unset)
                                        rule("self.all(k, k.lowerAscii() != 'launcher' || "
                                             "!has(self[k].replicas) || self[k].replicas == 1)",
                                             "Launcher replicas must be 1")]),
        "runPolicy": run_policy(sorted({*managers(MPI), *managers(MPI_V1)})),
        "slotsPerWorker": s("integer", "Slots per worker in the hostfile (default 1).",
                            format="int32", minimum=1),
        "runLauncherAsWorker": s("boolean", "v2beta1: also run ranks on the launcher."),
        "sshAuthMountPath": s("string", "v2beta1: where the SSH key is mounted (default "
                                        "/root/.ssh)."),
        "launcherCreationPolicy": s("string", "v2beta1: AtStartup (default) or "
                                              "WaitForWorkersReady.",
                                    enum=["AtStartup", "WaitForWorkersReady"]),
        "mpiImplementation": s("string", "v2beta1: OpenMPI (default), Intel or MPICH.",
                               enum=["OpenMPI", "Intel", "MPICH"]),
        "mainContainer": s("string", "v1: the container of the workers kubexec.sh runs ranks "
                                     "in (kubectl exec --container)."),
        "cleanPodPolicy": s("string", "v1, deprecated: use runPolicy.cleanPodPolicy, which "
                                      "wins when both are set.",
                            enum=["All", "Running", "None"]),
    }, required=["mpiReplicaSpecs"])
    return crd("MPIJob", "mpijobs", "v2beta1", spec, None,
               "MPIJob runs an MPI program. Written through v2beta1 (mpi-operator): "
               "SSH-reachable workers and a launcher batch Job. Written through v1 "
               "(training-operator): a launcher pod that reaches the workers with kubectl "
               "exec.")


def xgboost() -> dict[str, Any]:
    spec = obj("Desired state of the XGBoostJob.", {
        "xgbReplicaSpecs": replica_map(XGBOOST.kind, list(XGBOOST.replica_types),
                                       XGBOOST.default_container,
                                       XGBOOST.default_restart_policy, [
            rule("self.exists(k, k.lowerAscii() == 'master')",
                 "an XGBoostJob needs a Master replica spec"),
            one_replica("master", "Master replicas must be set to 1", required=True)]),
        "runPolicy": run_policy(managers(XGBOOST)),
    }, required=["xgbReplicaSpecs"])
    return crd("XGBoostJob", "xgboostjobs", "v1", spec, None,
               "XGBoostJob runs distributed XGBoost (or LightGBM) training: a Master that "
               "runs the Rabit tracker, and Workers.")


def paddle() -> dict[str, Any]:
    elastic = obj("Bounds for elastic PaddlePaddle training (min and max default to each "
                  "other, or to the Worker replicas).", {
        "minReplicas": s("integer", "Lower bound of Worker replicas.", format="int32"),
        "maxReplicas": s("integer", "Upper bound of Worker replicas.", format="int32"),
        "maxRestarts": s("integer", "How often pods may restart in elastic mode.",
                         format="int32"),
        "metrics": metrics_schema(),
    })
    spec = obj("Desired state of the PaddleJob.", {
        "paddleReplicaSpecs": replica_map(PADDLE.kind, list(PADDLE.replica_types),
                                          PADDLE.default_container,
                                          PADDLE.default_restart_policy, []),
        "runPolicy": run_policy(managers(PADDLE)),
        "elasticPolicy": elastic,
    }, required=["paddleReplicaSpecs"])
    return crd("PaddleJob", "paddlejobs", "v1", spec, worker_scale(PADDLE),
               "PaddleJob runs distributed PaddlePaddle training: a Master (parameter-server "
               "mode) and Workers, or Workers only (collective mode).")


def jax() -> dict[str, Any]:
    spec = obj("Desired state of the JAXJob.", {
        "jaxReplicaSpecs": replica_map(JAX.kind, list(JAX.replica_types), JAX.default_container,
                                       JAX.default_restart_policy, []),
        "runPolicy": run_policy(managers(JAX)),
    }, required=["jaxReplicaSpecs"])
    return crd("JAXJob", "jaxjobs", "v1", spec, worker_scale(JAX),
               "JAXJob runs multi-process JAX: Workers, of which worker 0 is the coordinator.")


def _managed_by_transition(doc: dict[str, Any]) -> None:
    """managedBy may not be added or removed after creation either (spec-level rule)."""
    spec = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    value = ("(has({s}.runPolicy) && has({s}.runPolicy.managedBy) ? "
             "{s}.runPolicy.managedBy : '')")
    spec.setdefault("x-kubernetes-validations", []).append(rule(
        f"{value.format(s='self')} == {value.format(s='oldSelf')}",
        "spec.runPolicy.managedBy is immutable"))


def _also_served_as(doc: dict[str, Any], version: str) -> None:
    """Serve the storage version's schema (types and rules the same) under another name too.

    One of the two copies leaves out the descriptions of the pod template fields (the core/v1
    API's own, two thirds of the schema's size): with both documented the CRD would outgrow
    the 256 KiB annotation in which a client-side ``kubectl apply`` keeps what it applied, and
    ``kubectl apply -k`` of the install would fail. The storage version's copy goes without:
    kubectl prefers a GA version over a beta one, so ``kubectl explain`` shows ``v1``'s docs
    unless told otherwise. The job's own fields stay documented in both versions."""
    versions = doc["spec"]["versions"]
    served = copy.deepcopy(versions[0])
    spec = versions[0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    for replicas in spec["properties"].values():
        template = (replicas.get("additionalProperties") or {}).get("properties", {}).get(
            "template")
        if template is not None:
            for child in template["properties"].values():
                _undocumented(child)
    versions.append({**served, "name": version, "storage": False})


def _undocumented(node: Any) -> None:
    if isinstance(node, dict):
        node.pop("description", None)
        for child in node.values():
            _undocumented(child)
    elif isinstance(node, list):
        for child in node:
            _undocumented(child)


def _has(key: str) -> str:
    return f"has(object.metadata.annotations) && '{key}' in object.metadata.annotations"


def _value(key: str) -> str:
    return f"object.metadata.annotations['{key}']"


def _check(key: str, valid: Callable[[str], str], message: str) -> dict[str, str]:
    """A validation of one annotation: ``valid`` (CEL of the value's expression) holds when
    it is set; the message names the annotation and quotes the value."""
    expression = f"!({_has(key)}) || ({valid(_value(key))})"
    quoted = f"'{key}: \"' + {_value(key)} + '\" {message}'"
    return {"expression": expression, "messageExpression": quoted}


def _policy(name: str, rules: list[dict[str, Any]], variables: list[dict[str, str]],
            validations: list[dict[str, str]], what: str) -> list[dict[str, Any]]:
    policy = {"apiVersion": "admissionregistration.k8s.io/v1",
              "kind": "ValidatingAdmissionPolicy",
              "metadata": {"name": name, "annotations": {"description": what}},
              "spec": {"failurePolicy": "Fail",
                       "matchConstraints": {"resourceRules": rules},
                       **({"variables": variables} if variables else {}),
                       "validations": validations}}
    binding = {"apiVersion": "admissionregistration.k8s.io/v1",
               "kind": "ValidatingAdmissionPolicyBinding",
               "metadata": {"name": name},
               "spec": {"policyName": name, "validationActions": ["Deny"]}}
    return [policy, binding]


def _rule(group: str, plurals: list[str]) -> dict[str, Any]:
    return {"apiGroups": [group], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
            "resources": plurals}


JOB_POLICY = "odh-training-job-guards"
HYGIENE_POLICY = "odh-training-trainjob-hygiene"


def admission() -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicies (and bindings) of the guards' annotations: a bad value
    is refused at admission with a message naming the annotation."""
    def duration(v: str) -> str:
        return (f"{v}.matches('{guards.DURATION_PATTERN}') && "
                f"!{v}.matches('{guards.ZERO_DURATION_PATTERN}')")
    limits_key = guards.RESTART_LIMITS
    names = f"{_value(limits_key)}.split(',').map(p, p.split('=')[0])"
    unknown = f"{names}.filter(n, !variables.types.exists(t, t.lowerAscii() == n.lowerAscii()))"
    job_checks = [
        _check(guards.PENDING_TIMEOUT, duration,
               "is not a duration above zero in hours, minutes and seconds, such as 10m, "
               "1h30m or 90s"),
        _check(guards.PENDING_TIMEOUT_ACTION, lambda v: f"{v} in {list(guards.ACTIONS)}",
               f"is not one of {', '.join(guards.ACTIONS)}"),
        {"expression": f"!({_has(guards.PENDING_TIMEOUT_ACTION)}) || "
                       f"({_has(guards.PENDING_TIMEOUT)})",
         "message": f"{guards.PENDING_TIMEOUT_ACTION} needs {guards.PENDING_TIMEOUT}"},
        _check(guards.RESTART_SCOPE, lambda v: f"{v} in {list(guards.SCOPES)}",
               f"is not one of {', '.join(guards.SCOPES)}"),
        _check(limits_key, lambda v: f"{v}.matches('{guards.LIMITS_PATTERN}')",
               "is not a list of <replica type>=<restarts>, such as Worker=3,Master=0"),
        {"expression": f"!({_has(limits_key)}) || "
                       f"!{_value(limits_key)}.matches('{guards.LIMITS_PATTERN}') || "
                       f"size({unknown}) == 0",
         "messageExpression": f"'{limits_key}: ' + {unknown}.join(', ') + "
                              "' is not a replica type of this job (' + "
                              "variables.types.join(', ') + ')'"},
    ]
    # the replica types of the job, whatever its kind (the one spec field of replica specs)
    variables = [{"name": "specs", "expression":
                  "object.spec.filter(k, k.endsWith('ReplicaSpecs'))"},
                 {"name": "types", "expression":
                  "size(variables.specs) == 0 ? [] : "
                  "object.spec[variables.specs[0]].map(t, t)"}]
    hygiene_checks = [
        _check(hygiene.TTL, lambda v: f"{v}.matches('{guards.DURATION_PATTERN}')",
               "is not a duration in hours, minutes and seconds, such as 0s, 10m or 24h"),
        _check(hygiene.HISTORY_LIMIT, lambda v: f"{v}.matches('{hygiene.HISTORY_PATTERN}')",
               "is not a count of finished TrainJobs to keep, such as 0 or 20"),
    ]
    plurals = sorted({fw.plural for fw in FRAMEWORKS})
    return [
        *_policy(JOB_POLICY, [_rule("kubeflow.org", plurals)], variables, job_checks,
                 "The guards a training job opts into by annotation (docs/training-jobs.md, Guards)."),
        *_policy(HYGIENE_POLICY, [_rule("trainer.kubeflow.org", ["trainjobs"]),
                                  _rule("", ["namespaces"])], [], hygiene_checks,
                 "The TTL and history limit of finished TrainJobs, on a TrainJob or a "
                 "namespace (docs/training-jobs.md, Guards)."),
    ]


def documents() -> dict[str, dict[str, Any]]:
    docs = {"pytorchjobs": pytorch(), "tfjobs": tensorflow(), "mxjobs": mxnet(), "mpijobs": mpi(),
            "xgboostjobs": xgboost(), "paddlejobs": paddle(), "jaxjobs": jax()}
    for doc in docs.values():
        _managed_by_transition(doc)
    _also_served_as(docs["mpijobs"], "v1")
    return {f"{plural}.kubeflow.org.yaml": doc for plural, doc in docs.items()}


def render(doc: dict[str, Any]) -> str:
    return yaml.safe_dump(doc, sort_keys=False, width=100)


POLICY_FILE = "guards-policy.yaml"


def main(argv: list[str]) -> int:
    stale = []
    texts = {name: render(doc) for name, doc in documents().items()}
    texts[POLICY_FILE] = ("# Generated by hack/gen_job_crds.py from functions/jobs/core/guards.py "
                          "and hygiene.py.\n"
                          + "---\n".join(render(doc) for doc in admission()))
    for name, text in texts.items():
        path = OUT / name
        if "--check" in argv:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print("out of date:", ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

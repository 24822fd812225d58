"""Schema builders shared by every training-job CRD (hack/gen_job_crds.py writes the CRDs).

Replica specs, run policy, status and the CRD envelope are the same for every kind, so they
are written once here; a kind adds only its replica types, its own spec fields and its rules.
"""

from __future__ import annotations

from typing import Any

from hack.pod_template_schema import pod_template_spec

Schema = dict[str, Any]

DNS1035 = "^[a-z]([-a-z0-9]*[a-z0-9])?$"


def s(type_: str, description: str, **extra: Any) -> Schema:
    return {"type": type_, "description": description, **extra}


def obj(description: str, properties: dict[str, Schema], **extra: Any) -> Schema:
    return {"type": "object", "description": description, "properties": properties, **extra}


def rule(expression: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"rule": expression, "message": message, **extra}


def pod_template(default_container: str | None) -> Schema:
    """The full core/v1 PodTemplateSpec (hack/pod_template_schema.py), bounded where our
    validation rules iterate, with those rules."""
    template = pod_template_spec()
    template["description"] = (
        "Pod template of this replica type (a core/v1 PodTemplateSpec). The controller "
        "overwrites spec.restartPolicy from the replica's restartPolicy and appends the "
        "framework's environment variables.")
    template["properties"]["metadata"]["description"] = (
        "Labels, annotations and finalizers copied onto every pod of this replica.")
    containers = template["properties"]["spec"]["properties"]["containers"]
    containers["maxItems"] = 64
    container = containers["items"]["properties"]
    container["name"]["maxLength"] = 253
    container["image"]["maxLength"] = 4096
    rules = [
        rule("has(self.spec) && has(self.spec.containers) && size(self.spec.containers) > 0",
             "template.spec.containers must list at least one container"),
        rule("!has(self.spec) || !has(self.spec.containers) || "
             "self.spec.containers.all(c, has(c.image) && c.image != '')",
             "every container in template.spec.containers needs a non-empty image"),
    ]
    if default_container:
        rules.append(rule(
            "!has(self.spec) || !has(self.spec.containers) || "
            f"self.spec.containers.exists(c, has(c.name) && c.name == '{default_container}')",
            f"one container in template.spec.containers must be named "
            f"\"{default_container}\" (the framework's default container)"))
    template["x-kubernetes-validations"] = rules
    return template


def replica_spec(default_container: str | None, default_policy: str) -> Schema:
    return obj(
        "Desired state of one replica type.",
        {"replicas": s("integer", "Number of pods of this replica type (default 1; MPIJob "
                                  "Worker default 0).", format="int32", minimum=0),
         "restartPolicy": s("string", "What to do when a pod of this replica fails: Always, "
                                      "OnFailure (kubelet restarts containers), Never (the job "
                                      "decides), or ExitCode (exit codes 1-127 are permanent "
                                      "failures, 128 and above recreate the pod). Default "
                                      f"{default_policy}.",
                            enum=["Always", "OnFailure", "Never", "ExitCode"]),
         "template": pod_template(default_container)},
        required=["template"])


def run_policy(managers: list[str]) -> Schema:
    allowed = " or ".join(managers)
    return obj(
        "Policies that apply to the whole job: cleanup, time limits, retries, queueing.",
        {"cleanPodPolicy": s("string", "Which pods to delete when the job finishes: All, "
                                       "Running (running and pending ones) or None (default).",
                             enum=["All", "Running", "None"]),
         "ttlSecondsAfterFinished": s("integer", "Delete the job this many seconds after it "
                                                 "finished (unset: never).",
                                      format="int32", minimum=0),
         "activeDeadlineSeconds": s("integer", "Fail the job once it has been running this "
                                               "many seconds (counted from status.startTime).",
                                    format="int64", minimum=0),
         "backoffLimit": s("integer", "Fail the job once its pods have been restarted this "
                                      "many times.", format="int32", minimum=0),
         "schedulingPolicy": obj(
             "Gang-scheduling settings for the job's PodGroup.",
             {"minAvailable": s("integer", "Pods that must be schedulable together "
                                           "(default: all replicas).", format="int32"),
              "queue": s("string", "Scheduler queue of the PodGroup (immutable).",
                         **{"x-kubernetes-validations": [rule(
                             "self == oldSelf",
                             "spec.runPolicy.schedulingPolicy.queue is immutable")]}),
              "minResources": {"type": "object", "description": "Resources the gang needs "
                                                                "(default: summed requests).",
                               "additionalProperties": {"anyOf": [{"type": "integer"},
                                                                  {"type": "string"}],
                                                        "x-kubernetes-int-or-string": True}},
              "priorityClass": s("string", "PriorityClass of the PodGroup."),
              "scheduleTimeoutSeconds": s("integer", "How long the gang may wait to be "
                                                     "scheduled.", format="int32")}),
         "suspend": s("boolean", "true deletes the job's pods and services and holds it; false "
                                 "resumes it (startTime restarts).", default=False),
         "managedBy": s("string", f"The controller that runs this job: {allowed}. Another "
                                  "manager leaves the job alone (no pods, no status). "
                                  "Immutable.",
                        maxLength=63,
                        **{"x-kubernetes-validations": [
                            rule(f"self in {managers!r}",
                                 f"spec.runPolicy.managedBy must be one of: {allowed} "
                                 "(or left unset)"),
                            rule("self == oldSelf", "spec.runPolicy.managedBy is immutable")]})})


def status_schema() -> Schema:
    condition = obj("One observation of the job's state.", {
        "type": s("string", "Created, Running, Restarting, Succeeded, Failed or Suspended."),
        "status": s("string", "True, False or Unknown."),
        "reason": s("string", "Machine-readable reason, <Kind><Reason>."),
        "message": s("string", "Human-readable detail."),
        "lastUpdateTime": s("string", "When the condition was last written.",
                            format="date-time"),
        "lastTransitionTime": s("string", "When the status last changed.", format="date-time"),
    }, required=["type", "status"])
    replica = obj("Pod counts of one replica type.", {
        "active": s("integer", "Running pods.", format="int32"),
        "succeeded": s("integer", "Succeeded pods.", format="int32"),
        "failed": s("integer", "Failed pods.", format="int32"),
        "labelSelector": obj("Deprecated; never set.", {},
                             **{"x-kubernetes-preserve-unknown-fields": True}),
        "selector": s("string", "Label selector of the replica's pods (for the scale "
                                "subresource)."),
    })
    return obj("Observed state of the job, written by the controller.", {
        "conditions": {"type": "array", "description": "Conditions in the order they were "
                                                       "reached; the last one is the State.",
                       "items": condition},
        "replicaStatuses": {"type": "object", "description": "Pod counts per replica type.",
                            "additionalProperties": replica},
        "startTime": s("string", "When the controller started the job (reset on resume).",
                       format="date-time"),
        "completionTime": s("string", "When the job succeeded or failed.", format="date-time"),
        "lastReconcileTime": s("string", "Last time pods were held back for gang scheduling.",
                               format="date-time"),
    })


def replica_map(kind: str, types: list[str], default_container: str | None,
                default_policy: str, extra_rules: list[dict[str, Any]]) -> Schema:
    lowered = [t.lower() for t in types]
    return {
        "type": "object",
        "description": f"Replica specs by replica type ({', '.join(types)}; keys are matched "
                       "case-insensitively).",
        "maxProperties": 8,
        "additionalProperties": replica_spec(default_container, default_policy),
        "x-kubernetes-validations": [
            rule(f"self.all(k, k.lowerAscii() in {lowered!r})",
                 f"{kind} replica types must be among: {', '.join(types)}"),
            *extra_rules],
    }


def name_rule() -> dict[str, Any]:
    return rule(f"self.metadata.name.matches('{DNS1035}') && size(self.metadata.name) <= 63",
                "metadata.name must be a DNS-1035 label: at most 63 lower-case letters, digits "
                "or '-', starting with a letter and ending with a letter or digit")


def one_replica(key: str, message: str, required: bool) -> dict[str, Any]:
    test = ("(has(self[k].replicas) && self[k].replicas == 1)" if required
            else "(!has(self[k].replicas) || self[k].replicas <= 1)")
    return rule(f"self.all(k, k.lowerAscii() != '{key}' || {test})", message)


def crd(kind: str, plural: str, version: str, spec: Schema, scale: dict[str, str] | None,
        description: str) -> dict[str, Any]:
    subresources: dict[str, Any] = {"status": {}}
    if scale:
        subresources["scale"] = scale
    root: Schema = obj(description, {
        "apiVersion": s("string", "APIVersion of this object."),
        "kind": s("string", "Kind of this object."),
        "metadata": {"type": "object"},
        "spec": spec,
        "status": status_schema(),
    }, required=["spec"], **{"x-kubernetes-validations": [name_rule()]})
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.kubeflow.org"},
        "spec": {
            "group": "kubeflow.org",
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural,
                      "singular": kind.lower(), "categories": ["kubeflow", "training"]},
            "scope": "Namespaced",
            "versions": [{
                "name": version, "served": True, "storage": True,
                "additionalPrinterColumns": [
                    {"name": "State", "type": "string",
                     "jsonPath": ".status.conditions[-1:].type"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}],
                "schema": {"openAPIV3Schema": root},
                "subresources": subresources,
            }],
        },
    }

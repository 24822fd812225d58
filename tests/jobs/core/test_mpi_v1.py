"""MPIJob kubeflow.org/v1 (training-operator 1.9): objects, plan and status."""

from __future__ import annotations

from typing import Any

import pytest

from functions.jobs.core import mpi_v1
from functions.jobs.core.defaults import with_defaults
from functions.jobs.core.frameworks import MPI_V1
from functions.jobs.core.plan import gc_plan, reconcile_plan, status_of
from functions.jobs.core.planning import Observed
from functions.jobs.core.pods import name_of
from functions.jobs.core.settings import Settings
from tests.jobs.fixtures import NOW, condition, job, pod, stamp, summary

FILE = "mpijob-v1-pi.yaml"
Obj = dict[str, Any]


def test_parsed_as_v1_with_upstream_defaults() -> None:
    d = with_defaults(job(FILE, spec={"cleanPodPolicy": "All"}))
    assert d.framework == MPI_V1
    assert (d.replicas("Launcher"), d.replica_specs["Launcher"].restart_policy) == (1, "Never")
    assert d.replica_specs["Worker"].restart_policy == "Never"
    assert d.run_policy.clean_pod_policy == "All"
    both = with_defaults(job(FILE, spec={"cleanPodPolicy": "All",
                                         "runPolicy": {"cleanPodPolicy": "Running"}}))
    assert both.run_policy.clean_pod_policy == "Running"


@pytest.mark.parametrize(("spec", "hostfile", "discover"), [
    pytest.param({}, "pi-worker-0 slots=2\npi-worker-1 slots=2\n",
                 "#!/bin/sh\necho pi-worker-0:2\necho pi-worker-1:2\n", id="cpu-launcher"),
    pytest.param({"mpiReplicaSpecs": {"Launcher": {"template": {"spec": {"containers": [
        {"name": "mpi", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}},
        "pi-launcher slots=2\npi-worker-0 slots=2\npi-worker-1 slots=2\n",
        "#!/bin/sh\necho pi-launcher:2\necho pi-worker-0:2\necho pi-worker-1:2\n",
        id="gpu-launcher-is-a-host"),
])
def test_config_map(spec: Obj, hostfile: str, discover: str) -> None:
    d = with_defaults(job(FILE, spec=spec))
    data = mpi_v1.config_map(d, ["pi-worker-1", "pi-worker-0"])["data"]
    assert (data["hostfile"], data["discover_hosts.sh"]) == (hostfile, discover)
    assert data["kubexec.sh"] == ('#!/bin/sh\nset -x\nPOD_NAME=$1\nshift\n'
                                  '/opt/kube/kubectl exec ${POD_NAME} -- /bin/sh -c "$*"')


def test_kubexec_names_the_main_container() -> None:
    d = with_defaults(job(FILE, spec={"mainContainer": "trainer"}))
    assert mpi_v1.kubexec(d).endswith(
        '/opt/kube/kubectl exec ${POD_NAME} --container trainer -- /bin/sh -c "$*"')


def test_launcher_rbac_allows_exec_into_its_workers_only() -> None:
    d = with_defaults(job(FILE))
    role = mpi_v1.role(d)
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"],
         "resourceNames": ["pi-worker-0", "pi-worker-1"]}]
    binding = mpi_v1.role_binding(d)
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "pi-launcher",
                                    "namespace": "team-d"}]
    assert binding["roleRef"]["name"] == "pi-launcher"
    alone = with_defaults(job(FILE, spec={"mpiReplicaSpecs": {"Worker": {"replicas": 0}}}))
    assert [r["resources"] for r in mpi_v1.role(alone)["rules"]] == [["pods"]]


def test_launcher_and_worker_pods() -> None:
    d = with_defaults(job(FILE))
    launcher, _ = mpi_v1.launcher_pod(d, Settings(kubectl_delivery_image="kd:1"))
    assert launcher["metadata"]["name"] == "pi-launcher"
    assert launcher["metadata"]["labels"] == {
        "training.kubeflow.org/operator-name": "mpijob-controller",
        "training.kubeflow.org/job-name": "pi",
        "training.kubeflow.org/replica-type": "launcher",
        "training.kubeflow.org/job-role": "master"}
    assert launcher["metadata"]["ownerReferences"][0]["apiVersion"] == "kubeflow.org/v1"
    spec = launcher["spec"]
    assert (spec["serviceAccountName"], spec["restartPolicy"]) == ("pi-launcher", "Never")
    [init] = spec["initContainers"]
    assert (init["name"], init["image"]) == ("kubectl-delivery", "kd:1")
    assert init["env"] == [{"name": "TARGET_DIR", "value": "/opt/kube"},
                           {"name": "NAMESPACE", "value": "team-d"}]
    assert [(v["name"], v["value"]) for v in spec["containers"][0]["env"]] == [
        ("OMPI_MCA_plm_rsh_agent", "/etc/mpi/kubexec.sh"),
        ("OMPI_MCA_orte_default_hostfile", "/etc/mpi/hostfile"),
        ("NVIDIA_VISIBLE_DEVICES", ""), ("NVIDIA_DRIVER_CAPABILITIES", ""),
        ("I_MPI_HYDRA_BOOTSTRAP", "rsh"), ("I_MPI_HYDRA_BOOTSTRAP_EXEC", "/etc/mpi/kubexec.sh")]
    items = spec["volumes"][-1]["configMap"]["items"]
    assert [(i["key"], i["mode"]) for i in items] == [
        ("kubexec.sh", 0o555), ("hostfile", 0o444), ("discover_hosts.sh", 0o555)]
    worker, _ = mpi_v1.worker_pod(d, 1, Settings())
    assert worker["metadata"]["labels"]["training.kubeflow.org/replica-index"] == "1"
    assert "training.kubeflow.org/job-role" not in worker["metadata"]["labels"]
    main = worker["spec"]["containers"][0]
    assert (main["command"], main["args"]) == (["sleep"], ["365d"])
    assert {"name": "mpi-job-config", "mountPath": "/etc/mpi"} in main["volumeMounts"]


def v1_pod(owner: Any, rtype: str, index: int, phase: str = "Running", **kw: Any) -> Obj:
    out = pod(owner, rtype, index, phase, **kw)
    if rtype == "Launcher":
        out["metadata"]["name"] = "pi-launcher"
        del out["metadata"]["labels"]["training.kubeflow.org/replica-index"]
    return out


def test_plan_creates_the_launcher_once_its_objects_and_workers_exist() -> None:
    j = job(FILE)
    first = reconcile_plan(Observed(job=j), NOW, Settings())
    assert sorted(f"{o['kind']}/{name_of(o)}" for o in first.creates) == [
        "ConfigMap/pi-config", "Pod/pi-worker-0", "Pod/pi-worker-1", "Role/pi-launcher",
        "RoleBinding/pi-launcher", "ServiceAccount/pi-launcher"]
    assert first.requeue_after == 1.0
    d = with_defaults(j)
    observed = Observed(job=j, pods=[v1_pod(j, "Worker", i) for i in (0, 1)],
                        config_map=mpi_v1.config_map(d, ["pi-worker-0", "pi-worker-1"]),
                        service_account=mpi_v1.service_account(d), role=mpi_v1.role(d),
                        role_binding=mpi_v1.role_binding(d))
    second = reconcile_plan(observed, NOW, Settings())
    assert [f"{o['kind']}/{name_of(o)}" for o in second.creates] == ["Pod/pi-launcher"]
    assert second.applies == []
    observed.pods.append(v1_pod(j, "Launcher", 0, "Failed"))
    assert reconcile_plan(observed, NOW, Settings()).empty, "a launcher is never replaced"


RUNNING = condition("Running", reason="MPIJobRunning", message="MPIJob pi is running.")
CREATED = condition("Created", reason="MPIJobCreated", message="MPIJob pi is created.")


@pytest.mark.parametrize(("phases", "policy", "expected", "message"), [
    pytest.param({"Launcher": "Running", "Worker": "Running"}, "Never",
                 [("Created", "True", "MPIJobCreated"), ("Running", "True", "MPIJobRunning")],
                 "MPIJob pi is running.", id="running"),
    pytest.param({"Launcher": "Succeeded", "Worker": "Running"}, "Never",
                 [("Created", "True", "MPIJobCreated"),
                  ("Succeeded", "True", "MPIJobSucceeded")],
                 "MPIJob pi is successfully completed.", id="succeeded"),
    pytest.param({"Launcher": "Running", "Worker": "Failed"}, "Never",
                 [("Created", "True", "MPIJobCreated"), ("Running", "False", "MPIJobRunning"),
                  ("Failed", "True", "MPIJobMPIJobFailed")],
                 "MPIJob pi is failed because 2 Worker replica(s) failed.", id="worker-failed"),
])
def test_status(phases: dict[str, str], policy: str, expected: list[tuple[str, str, str]],
                message: str) -> None:
    j = job(FILE, spec={"mpiReplicaSpecs": {"Worker": {"restartPolicy": policy}}})
    pods = [v1_pod(j, "Launcher", 0, phases["Launcher"])]
    pods += [v1_pod(j, "Worker", i, phases["Worker"]) for i in (0, 1)]
    outcome = status_of(Observed(job=j, pods=pods), NOW)
    assert outcome is not None
    assert summary(outcome.status.conditions) == expected
    assert outcome.status.conditions[-1].message == message
    if phases["Launcher"] == "Succeeded":
        counts = outcome.status.replica_statuses
        assert (counts["Launcher"].succeeded, counts["Worker"].active) == (1, 0)
        assert outcome.status.completion_time == stamp()


def test_gc_applies_clean_pod_policy_to_every_pod_and_the_ttl() -> None:
    j = job(FILE, spec={"runPolicy": {"cleanPodPolicy": "Running",
                                      "ttlSecondsAfterFinished": 0}},
            status={"conditions": [CREATED, RUNNING,
                                   condition("Succeeded", reason="MPIJobSucceeded")],
                    "completionTime": stamp(-10)})
    pods = [v1_pod(j, "Launcher", 0, "Succeeded"), v1_pod(j, "Worker", 0, "Running")]
    plan = gc_plan(Observed(job=j, pods=pods), [], NOW)
    assert [name_of(p) for p in plan.deletes] == ["pi-worker-0"]
    assert plan.delete_job

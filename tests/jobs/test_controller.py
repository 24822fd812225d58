"""Registration of the training-job controllers and their small pure functions."""

from __future__ import annotations

from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from functions.core.keys import ObjectKey
from functions.jobs.controller import CONTROLLERS, new_ssh_keys, settings_from_env
from tests.jobs.fake_api import JobApi, run_status
from tests.jobs.fixtures import load


def _controller(kind: str) -> Any:
    return next(c for c in CONTROLLERS if c.parent.kind == kind)


def test_one_controller_per_kind_with_three_handlers() -> None:
    assert sorted(c.parent.kind for c in CONTROLLERS) == [
        "JAXJob", "MPIJob", "MXJob", "PaddleJob", "PyTorchJob", "TFJob", "XGBoostJob"]
    for controller in CONTROLLERS:
        assert set(controller.handlers) == {"reconcile", "status", "gc"}


def _pod(labels: dict[str, str], owners: list[dict[str, Any]]) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns", "labels": labels,
                         "ownerReferences": owners}}


OWNED = [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "mnist",
          "uid": "u", "controller": True}]
LABELLED = {"training.kubeflow.org/operator-name": "pytorchjob-controller",
            "training.kubeflow.org/job-name": "mnist"}


@pytest.mark.parametrize(("kind", "api_version", "child_kind", "obj", "parent"), [
    pytest.param("PyTorchJob", "v1", "Pod", _pod({}, OWNED),
                 ObjectKey("kubeflow.org/v1", "PyTorchJob", "ns", "mnist"), id="owner-ref"),
    pytest.param("PyTorchJob", "v1", "Service", _pod(LABELLED, []),
                 ObjectKey("kubeflow.org/v1", "PyTorchJob", "ns", "mnist"), id="job-name-label"),
    pytest.param("TFJob", "v1", "Pod", _pod(LABELLED, []), None, id="other-operator-label"),
    pytest.param("MPIJob", "v1", "Pod",
                 _pod({"training.kubeflow.org/operator-name": "mpi-operator",
                       "training.kubeflow.org/job-name": "pi"}, []),
                 ObjectKey("kubeflow.org/v2beta1", "MPIJob", "ns", "pi"), id="mpi-launcher-pod"),
    pytest.param("MPIJob", "batch/v1", "Job",
                 _pod({}, [{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
                            "name": "pi", "uid": "u", "controller": True}]),
                 ObjectKey("kubeflow.org/v2beta1", "MPIJob", "ns", "pi"), id="mpi-launcher-job"),
    pytest.param("JAXJob", "scheduling.volcano.sh/v1beta1", "PodGroup",
                 _pod({}, [{"apiVersion": "kubeflow.org/v1", "kind": "JAXJob", "name": "spmd",
                            "uid": "u", "controller": True}]),
                 ObjectKey("kubeflow.org/v1", "JAXJob", "ns", "spmd"), id="volcano-podgroup"),
    pytest.param("MPIJob", "scheduling.x-k8s.io/v1alpha1", "PodGroup",
                 _pod({}, [{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
                            "name": "pi", "uid": "u", "controller": True}]),
                 ObjectKey("kubeflow.org/v2beta1", "MPIJob", "ns", "pi"),
                 id="scheduler-plugins-podgroup"),
    pytest.param("PyTorchJob", "scheduling.volcano.sh/v1beta1", "PodGroup",
                 _pod({}, [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                            "name": "vcjob", "uid": "u", "controller": True}]),
                 None, id="someone-elses-podgroup"),
])
def test_child_mappings(kind: str, api_version: str, child_kind: str, obj: dict[str, Any],
                        parent: ObjectKey | None) -> None:
    found = _controller(kind).parents_of(api_version, child_kind, obj)
    assert found == ([parent] if parent else [])


def test_settings_from_env() -> None:
    settings = settings_from_env({"TRAINING_GANG_SCHEDULER": "volcano",
                                  "CUSTOM_CLUSTER_DOMAIN": "cluster.local",
                                  "PYTORCH_INIT_CONTAINER_MAX_TRIES": "7"})
    assert (settings.gang_scheduler, settings.cluster_domain,
            settings.init_container_max_tries) == ("volcano", "cluster.local", 7)
    assert settings_from_env({}).gang_scheduler == ""


def test_ssh_keys_are_a_matching_p521_pair() -> None:
    keys = new_ssh_keys()
    private = serialization.load_pem_private_key(keys.private_pem, password=None)
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    assert private.curve.name == "secp521r1"
    public = private.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                               serialization.PublicFormat.OpenSSH)
    assert keys.public_openssh == public + b"\n"
    assert new_ssh_keys().private_pem != keys.private_pem


def test_the_status_handler_reports_the_version_its_write_left_the_job_at() -> None:
    """The runtime answers the event of that version without a pass: the write was
    conditional on the version the pass read, so only the pass's own change is in it."""
    job = load("jaxjob-workers.yaml")
    job["metadata"]["uid"] = "uid-wrote"
    api = JobApi(job)
    first = run_status(api)
    assert api.status_writes == 1
    assert first is not None and first.wrote == int(api.job["metadata"]["resourceVersion"])
    again = run_status(api)
    assert api.status_writes == 1
    assert again is None or again.wrote is None

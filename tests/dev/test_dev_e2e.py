"""End to end, as a user runs it: ``python -m functions dev``'s stack (real ApiServerSource
adapter, router from ``eventing/``, functions under gunicorn with their own ServiceAccount
tokens), then the samples are applied and must converge.

Set ``UPDATE_RECORDINGS=1`` to refresh the recorded event stream under
``tests/data/recordings/`` from this run (the replay tests use it).
"""

from __future__ import annotations

import copy
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from functions.cluster import kwok
from functions.dev.stack import DevStack, function_identities
from functions.kube import resources
from functions.kube.client import KubeClient
from tests.support import REPO, condition, wait_for

RECORDINGS = REPO / "tests" / "data" / "recordings"
SAMPLES = REPO / "config" / "samples"


def succeeding(job: dict[str, Any]) -> dict[str, Any]:
    """The sample job with every replica's pods told (through kwok) to finish successfully."""
    job = copy.deepcopy(job)
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        meta = replica["template"].setdefault("metadata", {})
        meta.setdefault("labels", {})[kwok.RESULT_LABEL] = "succeed"
        meta.setdefault("annotations", {})[kwok.DELAY_ANNOTATION] = "3s"
    return job


@pytest.fixture(scope="module")
def stack(bin_dir: Path, upstream_manifests: Path,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStack]:
    recording = tmp_path_factory.mktemp("recording") / "e2e-samples.jsonl"
    dev = DevStack(bin_dir, trainer_manifests=upstream_manifests,
                   resync_interval=5.0, record=recording)
    dev.start()
    try:
        yield dev
    except BaseException:
        assert dev.cluster is not None
        print(dev.cluster.logs_summary(60))
        raise
    finally:
        if dev.cluster is not None:
            for component in dev.processes:
                print(f"--- {component.name} ---\n{component.tail(40)}")
        dev.stop()
        if os.environ.get("UPDATE_RECORDINGS") and recording.exists():
            RECORDINGS.mkdir(parents=True, exist_ok=True)
            shutil.copy(recording, RECORDINGS / recording.name)


def test_functions_run_as_their_own_service_accounts(stack: DevStack) -> None:
    identities = function_identities(REPO / "config" / "serving")
    assert {i.function for i in identities} == {"reconcile", "gc", "status"}
    assert all(i.service_account for i in identities)
    assert set(stack.function_urls) == {"reconcile", "gc", "status"}


def test_samples_converge_through_the_real_event_path(stack: DevStack) -> None:
    assert stack.cluster is not None
    kube: KubeClient = stack.cluster.client()
    trainer = yaml.safe_load((SAMPLES / "trainer.yaml").read_text())
    kube.apply(trainer, "e2e-user")
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}},
               "e2e-user")
    job = succeeding(yaml.safe_load((SAMPLES / "pytorchjob.yaml").read_text()))
    job["metadata"]["namespace"] = "demo"
    kube.apply(job, "e2e-user")

    name = job["metadata"]["name"]
    finished = wait_for(
        lambda: condition(kube.get(resources.PYTORCHJOBS, name, "demo"), "Succeeded")
        .get("status") == "True", 120, 0.5, "the sample PyTorchJob to succeed")
    assert finished
    ready = wait_for(
        lambda: (t := kube.get(resources.TRAINERS, "default-trainer"))
        and condition(t, "Ready").get("status") == "True" and t, 120, 0.5,
        "the Trainer to become Ready")
    assert ready["status"]["phase"] == "Ready"
    stack.check_processes()
    assert stack.router is not None
    assert stack.router.deliveries, "no event reached a function"

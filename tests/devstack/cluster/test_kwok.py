"""kwok's ``--config``: its options first, then the stages (pure; the cluster tests run kwok
with it, and a configuration kwok refused would stop every cluster from starting)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from devstack.cluster import kwok

POD_READY = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-ready
spec:
  next:
    statusTemplate: |
      {{ $podIPs := PodIPsWith .spec.nodeName }}
      podIP: {{ index $podIPs 0 }}
      phase: Running
"""


@pytest.fixture
def stage_dir(tmp_path: Path) -> Path:
    for relative in kwok.UPSTREAM_STAGES:
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        name = Path(relative).stem
        path.write_text(POD_READY if relative == kwok.POD_READY_STAGE else
                        f"apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\n"
                        f"metadata:\n  name: {name}\n")
    return tmp_path


def test_the_configuration_comes_first_and_plays_pods_in_parallel(stage_dir: Path) -> None:
    first, *stages = yaml.safe_load_all(kwok.stages_config(stage_dir))
    assert (first["apiVersion"], first["kind"]) == ("config.kwok.x-k8s.io/v1alpha1",
                                                    "KwokConfiguration")
    assert first == kwok.KWOK_CONFIGURATION
    options = first["options"]
    assert options["podPlayStageParallelism"] == kwok.POD_PLAY_PARALLELISM > 4
    assert {stage["kind"] for stage in stages} == {"Stage"}
    assert len(stages) == len(kwok.UPSTREAM_STAGES) + 2  # ours: succeed and fail on a label


@pytest.mark.parametrize("option", [
    pytest.param("nodePlayStageParallelism", id="node-stages"),
    pytest.param("nodeLeaseParallelism", id="node-leases"),
    pytest.param("podsOnNodeSyncParallelism", id="pods-on-node-sync"),
    pytest.param("cidr", id="pod-cidr"),
])
def test_options_kwok_would_leave_at_zero_are_given(stage_dir: Path, option: str) -> None:
    """kwok defaults none of a configuration read from a file: a parallelism of 0 stops it
    ("node leases parallelism must be greater than 0")."""
    first = next(yaml.safe_load_all(kwok.stages_config(stage_dir)))
    assert first["options"][option]

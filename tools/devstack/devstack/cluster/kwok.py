"""kwok configuration: fake nodes and the stages that move pods through their lifecycle.

kwok plays every kubelet: pods bound to its nodes become Running and Ready, pods owned by a
batch Job complete, and deleted pods go away. Tests steer any other pod through labels on the
pod (set them on a job's pod template):

* ``kwok.x-k8s.io/result: succeed`` — the pod ends ``Succeeded`` with exit code 0;
* ``kwok.x-k8s.io/result: fail`` — the pod ends ``Failed``; the exit code comes from the
  annotation ``kwok.x-k8s.io/exit-code`` (default 1);
* annotation ``kwok.x-k8s.io/delay`` (a Go duration, e.g. ``"2s"``, default ``"1s"``) — how
  long the pod stays Running first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

RESULT_LABEL = "kwok.x-k8s.io/result"
EXIT_CODE_ANNOTATION = "kwok.x-k8s.io/exit-code"
DELAY_ANNOTATION = "kwok.x-k8s.io/delay"
NODE_ANNOTATION = "kwok.x-k8s.io/node"

# Stage files of the kwok module, relative to its kustomize/stage directory.
POD_READY_STAGE = "pod/fast/pod-ready.yaml"
UPSTREAM_STAGES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    POD_READY_STAGE,
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)

_FINISH_STAGE = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-{result}-on-label
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Running']
    - key: '.metadata.labels["{label}"]'
      operator: 'In'
      values: ['{result}']
  delay:
    durationMilliseconds: 1000
    durationFrom:
      expressionFrom: '.metadata.annotations["{delay}"]'
  weight: 10000
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      {{{{ $annotations := or .metadata.annotations dict }}}}
      {{{{ $code := or ( index $annotations "{exit_code}" ) {default_code} }}}}
      phase: {phase}
      conditions:
      - lastTransitionTime: {{{{ $now | Quote }}}}
        status: "False"
        reason: PodCompleted
        type: Ready
      - lastTransitionTime: {{{{ $now | Quote }}}}
        status: "False"
        reason: PodCompleted
        type: ContainersReady
      containerStatuses:
      {{{{ range .spec.containers }}}}
      - name: {{{{ .name | Quote }}}}
        image: {{{{ .image | Quote }}}}
        ready: false
        started: false
        restartCount: 0
        state:
          terminated:
            exitCode: {{{{ $code }}}}
            reason: {reason}
            startedAt: {{{{ $now | Quote }}}}
            finishedAt: {{{{ $now | Quote }}}}
      {{{{ end }}}}
"""


def finish_stage(result: str) -> str:
    """The Stage that ends a labelled Running pod as ``succeed`` or ``fail``."""
    succeed = result == "succeed"
    return _FINISH_STAGE.format(
        result=result, label=RESULT_LABEL, delay=DELAY_ANNOTATION, exit_code=EXIT_CODE_ANNOTATION,
        default_code=0 if succeed else 1, phase="Succeeded" if succeed else "Failed",
        reason="Completed" if succeed else "Error",
    )


# How many pod stages kwok plays at once (its default is 4). kwok stands in for the kubelets of
# every fake node, and each play is one status patch: with 4 at a time and the API server taking
# about 70 ms per patch under a burst of pod creations, pods turn Running at some 57 per second,
# fewer than a controller creates, so the time a job takes to be Running would measure kwok's
# queue rather than the controller. Real kubelets update their pods' status each on its own
# (50 requests per second per node by default).
POD_PLAY_PARALLELISM = 32

# kwok applies no defaults to a KwokConfiguration read from --config: every option whose zero
# value is not its default is given here, with kwok v0.8.0's defaults (pkg/apis/config/
# v1alpha1, zz_generated.defaults.go) but for the pods' parallelism.
KWOK_CONFIGURATION: dict[str, Any] = {
    "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
    "kind": "KwokConfiguration",
    "options": {
        "cidr": "10.0.0.0/24",
        "manageAllNodes": False,
        "enableDebuggingHandlers": True,
        "enableContentionProfiling": False,
        "enableProfilingHandler": True,
        "podPlayStageParallelism": POD_PLAY_PARALLELISM,
        "nodePlayStageParallelism": 4,
        "nodeLeaseParallelism": 4,
        "podsOnNodeSyncParallelism": 1,
        "enablePodsOnNodeSyncListPager": True,
        "enablePodsOnNodeSyncStreamWatch": False,
    },
}


def stages_config(stage_dir: Path, local_images: tuple[str, ...] = ()) -> str:
    """kwok's ``--config`` document: its options (:data:`POD_PLAY_PARALLELISM`), then the
    upstream fast stages plus ours, joined with ``---``.

    Pods whose (first) container image is in ``local_images`` are left alone by the pod
    stages that would start them: another kubelet runs those (:mod:`devstack.kubelet`).
    Their deletion is still finished by kwok.
    """
    documents = [yaml.safe_dump(KWOK_CONFIGURATION, sort_keys=False).strip()]
    for relative in UPSTREAM_STAGES:
        path = stage_dir / relative
        if not path.exists():
            raise FileNotFoundError(f"kwok stage file missing: {path}")
        text = path.read_text().strip()
        if relative == POD_READY_STAGE:
            text = _keep_pod_ip(text)
        if local_images and relative.startswith("pod/") and "pod-delete" not in relative:
            text = _skip_images(text, local_images)
        documents.append(text)
    documents.append(finish_stage("succeed").strip())
    documents.append(finish_stage("fail").strip())
    return "\n---\n".join(documents) + "\n"


def _keep_pod_ip(stage: str) -> str:
    """The pod-ready stage, giving a pod an IP only when it has none.

    kwok v0.8.0 takes a new IP from its pool each time it plays the stage for a pod. When two
    plays of one pod race (a burst of pods, several played at once), the second patch adds a
    second IP, the API server refuses a pod with two IPs of one family, and every retry takes
    yet another IP: the pod never runs. With the guard, a retry sees the IP the first play
    wrote and writes none.
    """
    doc = yaml.safe_load(stage)
    template = doc["spec"]["next"]["statusTemplate"]
    start = template.find("{{ $podIPs := PodIPsWith")
    end = template.find("phase: Running", start)
    if start < 0 or end < 0:
        raise ValueError("kwok's pod-ready stage no longer assigns pod IPs as expected")
    doc["spec"]["next"]["statusTemplate"] = (
        template[:start] + "{{ if not .status.podIP }}\n" + template[start:end]
        + "{{ end }}\n" + template[end:])
    return yaml.safe_dump(doc, sort_keys=False).strip()


def _skip_images(stage: str, images: tuple[str, ...]) -> str:
    doc = yaml.safe_load(stage)
    expressions = doc["spec"].setdefault("selector", {}).setdefault("matchExpressions", [])
    expressions.append({"key": ".spec.containers[0].image", "operator": "NotIn",
                        "values": list(images)})
    return yaml.safe_dump(doc, sort_keys=False).strip()


def node(name: str, *, cpu: str = "64", memory: str = "256Gi", pods: str = "1500",
         ephemeral_storage: str = "1Ti", gpus: int = 0) -> dict[str, Any]:
    """A fake node kwok manages; ``gpus`` adds ``nvidia.com/gpu`` capacity. Like a kubelet's
    node, it reports local ephemeral storage: pods that request some (MPIJob v1's launcher
    does) are scheduled only where there is."""
    capacity = {"cpu": cpu, "memory": memory, "pods": pods,
                "ephemeral-storage": ephemeral_storage}
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
              "kubernetes.io/arch": "amd64", "type": "kwok"}
    if gpus:
        capacity["nvidia.com/gpu"] = str(gpus)
        labels["nvidia.com/gpu.present"] = "true"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": {NODE_ANNOTATION: "fake"}},
        "spec": {},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


def default_nodes() -> list[dict[str, Any]]:
    """Two CPU nodes and two GPU nodes with eight GPUs each."""
    return [node("kwok-cpu-0"), node("kwok-cpu-1"),
            node("kwok-gpu-0", gpus=8), node("kwok-gpu-1", gpus=8)]

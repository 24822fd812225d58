"""The API server restarts (an upgrade, a crash): every watch ends, and the ApiServerSource
adapter's resumed watch is refused as too old, so it lists again and sends nothing for what
changed before that list (:mod:`functions.kube.gaps`). The functions' informers see the same
reset and hand what changed around it to the functions: a job created in the adapter's gap
runs to its end with no PingSource and no adapter restart."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from devstack.stack import DevStack
from functions.kube import resources
from functions.kube.client import KubeClient
from tests.chaos.scenario import succeeding_job
from tests.dev.e2e.conftest import NAMESPACE, OBJECTS_ADAPTER_PODS, events_of
from tests.support import condition, wait_for


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


@contextmanager
def paused(pid: int) -> Iterator[None]:
    """The process tree of ``pid`` stopped (SIGSTOP) for the block."""
    tree = descendants(pid)
    for each in tree:
        os.kill(each, signal.SIGSTOP)
    try:
        yield
    finally:
        for each in tree:
            with suppress(ProcessLookupError):
                os.kill(each, signal.SIGCONT)


def test_a_job_created_while_the_api_server_restarts_converges_without_the_resync(
        stack: DevStack, kube: KubeClient) -> None:
    knative, cluster = stack.knative, stack.cluster
    assert knative is not None and knative.kubelet is not None and cluster is not None
    wait_for(lambda: len(kube.list(resources.PODS, NAMESPACE,
                                   label_selector=OBJECTS_ADAPTER_PODS)) == 1,
             60, 0.2, "one adapter pod of odh-training-objects")
    [adapter] = kube.list(resources.PODS, NAMESPACE, label_selector=OBJECTS_ADAPTER_PODS)
    [local] = [p for p in knative.kubelet.snapshot() if p.uid == adapter["metadata"]["uid"]]
    assert local.process is not None
    logs = {name: cluster.logs / f"function-{name}.log" for name in ("reconcile", "status")}
    sizes = {name: path.stat().st_size for name, path in logs.items()}
    job = succeeding_job("PyTorchJob", "default")
    name = job["metadata"]["name"] = "watch-reset"   # a name no other test of the stack uses
    assert kube.get(resources.PYTORCHJOBS, name, "default") is None
    recorded = len(knative.events())
    # The adapter is held while the API server restarts and the job is created, so that its
    # watch resumes only afterwards: refused as too old, it lists again past the job's create.
    with paused(local.process.pid):
        cluster.restart_apiserver()
        kube.apply(job, "e2e-user")
        started = time.monotonic()
    time.sleep(3)
    assert events_of(knative.events()[recorded:], "PyTorchJob", name, "default") == [], \
        "the job's create was not in the adapter's gap"
    wait_for(lambda: condition(kube.get(resources.PYTORCHJOBS, name, "default"), "Succeeded")
             .get("status") == "True", 120, 0.5, "the job created in the gap to succeed")
    print(f"job created in the adapter's gap Succeeded {time.monotonic() - started:.1f}s later")
    [now] = kube.list(resources.PODS, NAMESPACE, label_selector=OBJECTS_ADAPTER_PODS)
    assert now["metadata"]["uid"] == adapter["metadata"]["uid"], "the adapter was not replaced"
    since = {}
    for function, path in logs.items():
        with path.open("rb") as log:
            log.seek(sizes[function])
            since[function] = log.read().decode(errors="replace")
    everything = "\n".join(f"--- {f}:\n{text}" for f, text in since.items())
    for text in since.values():
        # Both functions' informers hand the gap's changes over; neither a resync (an adapter
        # restart's) nor a wake passed over the job.
        assert "changed around a watch reset" in text, everything
        assert " resync: " not in text and " wake: " not in text, everything
    # The job's create never reached the functions as an event: the first event about it is
    # the update of a function's own write, after a hand-over's pass.
    kinds = [e.get("type", "") for e in events_of(knative.events()[recorded:], "PyTorchJob",
                                                   name, "default")]
    assert kinds and not kinds[0].endswith(".add"), kinds
    # Reconcile got the job's pods from its own hand-over's pass, or from the event of
    # status's write in its hand-over's pass (the Created condition), whichever came first.
    assert "changes no event has brought" in since["reconcile"] or (
        "changes no event has brought" in since["status"]), everything

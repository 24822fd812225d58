"""Fixtures: one real local cluster per test session (per xdist worker), a namespace per test,
the upstream trainer manifests; and the markers that say what a test needs.

A cluster that cannot start fails the tests that need it, with the component's log; it never
skips them. Component logs are attached to the report of every failed test that used the
cluster.

A test is marked by the fixtures it uses (their whole closure), so a marker cannot be
forgotten: ``cluster`` (the local control plane), ``binaries`` (the Go-built binaries of
``hack/ensure-testbin.sh``, e.g. kustomize), ``upstream`` (the upstream trainer manifests,
fetched at the pinned commit or copied from ``TRAINER_MANIFESTS_SOURCE``). ``make unit`` runs
the tests that carry none of them.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
import uuid
import weakref
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from devstack.cluster.binaries import ensure_bin_dir
from devstack.cluster.manifests import apply_objects, load_documents
from devstack.cluster.runner import LocalCluster
from devstack.upstream import fetch_trainer_manifests
from functions.kube import resources
from functions.kube.client import KubeClient
from functions.runtime.app import FunctionRuntime
from tests.support import REPO

_active_cluster: LocalCluster | None = None

# The functions and the dead-letter sink take a delivery only with the Broker's bearer token
# (functions.runtime.delivery_auth), unless FUNCTIONS_DELIVERY_AUTH=none. The tests that post
# events to them directly, as a Broker would, run them with that check off, and so do the
# processes they start; the tests of the check turn it on themselves
# (tests/runtime/test_delivery_auth.py), and the local stack (devstack.stack) turns it
# on for its receivers whatever this says (tests/dev/e2e).
os.environ["FUNCTIONS_DELIVERY_AUTH"] = "none"

# Property and fuzz tests explore freely on a developer's machine; in CI (CI=true) they replay
# a fixed, derived set of examples so a run is reproducible and a red build is never chance.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


# Every function runtime the tests build (``create_app``): its background work (informers,
# Event sender, requeue timers) stops with the test that built it, or with the session when a
# wider fixture built it.
_runtimes: weakref.WeakSet[FunctionRuntime] = weakref.WeakSet()


@pytest.fixture(scope="session", autouse=True)
def _function_runtimes() -> Iterator[None]:
    built = FunctionRuntime.__init__

    def tracked(self: FunctionRuntime, *args: Any, **kwargs: Any) -> None:
        built(self, *args, **kwargs)
        _runtimes.add(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(FunctionRuntime, "__init__", tracked)
        yield
    for runtime in list(_runtimes):
        runtime.close()


@pytest.fixture(autouse=True)
def _close_function_runtimes(_function_runtimes: None) -> Iterator[None]:
    before = set(_runtimes)
    yield
    for runtime in set(_runtimes) - before:
        runtime.close()


@pytest.fixture(scope="session")
def bin_dir() -> Path:
    directory = ensure_bin_dir()
    os.environ.setdefault("KUSTOMIZE_BIN", str(directory / "kustomize"))
    os.environ.setdefault("KUBEBUILDER_ASSETS", str(directory))
    return directory


@pytest.fixture(scope="session")
def upstream_manifests() -> Path:
    """The upstream trainer manifests of the pinned commit (the fetch script's cache)."""
    return fetch_trainer_manifests()


@pytest.fixture(scope="session")
def cluster(bin_dir: Path) -> Iterator[LocalCluster]:
    global _active_cluster
    local = LocalCluster(bin_dir)
    local.start()
    _active_cluster = local
    try:
        yield local
    finally:
        _active_cluster = None
        local.stop()


@pytest.fixture(scope="session")
def kube(cluster: LocalCluster) -> KubeClient:
    return cluster.client()


@pytest.fixture(scope="session")
def crds(kube: KubeClient) -> None:
    """This project's CRDs (their CEL rules are the admission checks), installed once."""
    apply_objects(kube, load_documents([REPO / "config" / "crd"]))


@pytest.fixture
def namespace(kube: KubeClient, request: pytest.FixtureRequest) -> Iterator[str]:
    base = "".join(ch if ch.isalnum() else "-" for ch in request.node.name.lower())[:40]
    name = f"{base.strip('-')}-{uuid.uuid4().hex[:6]}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
                res=resources.NAMESPACES)
    deadline = time.monotonic() + 20
    while kube.get(resources.SERVICEACCOUNTS, "default", name) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no default ServiceAccount in {name}")
        time.sleep(0.05)
    yield name
    kube.delete(resources.NAMESPACES, name)


@pytest.fixture(scope="session")
def k8s_api(cluster: LocalCluster) -> Any:
    """An official ``kubernetes`` client for assertions from a second point of view."""
    from kubernetes import config  # imported here: it is slow and only tests need it

    return config.new_client_from_config(config_file=str(cluster.kubeconfig))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed and _active_cluster is not None and "cluster" in getattr(
            item, "fixturenames", ()):
        report.sections.append(("local cluster logs", _active_cluster.logs_summary()))
    return report


_finished: pytest.Session | None = None


def pytest_sessionfinish(session: pytest.Session) -> None:
    global _finished
    _finished = session


def _kind_of(thread_name: str) -> str:
    """A thread's name without what numbers it: ``Thread-12 (_accept)`` is ``_accept``,
    ``job-writes_3`` is ``job-writes``."""
    unnamed = re.fullmatch(r"Thread-\d+ \((.+)\)", thread_name)
    name = unnamed.group(1) if unnamed else thread_name
    return name.rstrip("0123456789_-") or name


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """End the test process once every plugin has finished, without the interpreter's
    teardown, with the session's exit status.

    Tests leave daemon threads behind (function runtimes' informers and Event senders, whose
    clusters are gone, retrying their watches), and the interpreter's teardown under them
    once ended a run whose every test had passed with a segmentation fault. The threads still
    running are named on stderr, grouped by name, so that they can be found and stopped."""
    if _finished is None or hasattr(config, "workerinput"):
        return
    left = Counter(_kind_of(thread.name) for thread in threading.enumerate()
                   if thread is not threading.main_thread() and thread.is_alive())
    if left:
        print(f"{sum(left.values())} threads still running as the tests end: "
              + ", ".join(f"{name} x{count}" for name, count in left.most_common()),
              file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(_finished.exitstatus))


# marker -> the fixtures that make a test need it
NEEDS = {
    "cluster": ("cluster",),
    "binaries": ("bin_dir", "kustomize_bin"),
    "upstream": ("upstream_manifests",),
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with what its fixtures need (``make unit``: ``-m "not cluster and not
    binaries and not upstream"``). A ``cluster`` test always needs the binaries too."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        needs = {marker for marker, names in NEEDS.items() if fixtures & set(names)}
        needs |= {m.name for m in item.iter_markers() if m.name in NEEDS}
        if "cluster" in needs:
            needs.add("binaries")
        for marker in sorted(needs):
            if item.get_closest_marker(marker) is None:
                item.add_marker(getattr(pytest.mark, marker))

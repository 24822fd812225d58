"""``doctor`` reaches a real API server through kubeconfigs as kubectl reads them: a context
chosen with and without ``--kubeconfig``, a merged ``KUBECONFIG`` list, and an exec credential
plugin, whose identity is the one the API server then sees."""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devstack.cluster.runner import LocalCluster
from devstack.tokens import service_account_token
from functions.__main__ import main
from functions.kube import resources
from functions.kube.client import KubeClient
from functions.kube.config import from_kubeconfig
from functions.kube.resources import Resource

pytestmark = pytest.mark.cluster

Obj = dict[str, Any]
UNREACHABLE = "https://127.0.0.1:9"  # nothing listens on the discard port
CLUSTERROLEBINDINGS = Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings",
                               "ClusterRoleBinding", namespaced=False)
SELFSUBJECTREVIEWS = Resource("authentication.k8s.io", "v1", "selfsubjectreviews",
                              "SelfSubjectReview", namespaced=False)


def admin(cluster: LocalCluster) -> Obj:
    doc = yaml.safe_load(cluster.kubeconfig.read_text())
    assert isinstance(doc, dict)
    return doc


def entry(doc: Obj, kind: str) -> Obj:
    found = doc[kind][0]
    assert isinstance(found, dict)
    return found


def write(path: Path, doc: Obj) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


def doctor(*args: str) -> int:
    return main(["doctor", *args, "-n", "doctor-kubeconfig", "--json"])


@pytest.fixture
def two_contexts(cluster: LocalCluster, tmp_path: Path) -> Path:
    """The admin's kubeconfig with a current context whose server nothing answers, and the
    real one as context ``real``."""
    doc = admin(cluster)
    real_cluster, real_user = entry(doc, "clusters"), entry(doc, "users")
    return write(tmp_path / "two-contexts", {
        "apiVersion": "v1", "kind": "Config", "current-context": "broken",
        "clusters": [real_cluster, {"name": "nowhere", "cluster": {"server": UNREACHABLE}}],
        "users": [real_user],
        "contexts": [{"name": "broken", "context": {"cluster": "nowhere",
                                                    "user": real_user["name"]}},
                     {"name": "real", "context": {"cluster": real_cluster["name"],
                                                  "user": real_user["name"]}}]})


@pytest.mark.parametrize(("use_flag", "context", "reached"), [
    pytest.param(True, "real", True, id="kubeconfig-and-context"),
    pytest.param(False, "real", True, id="context-from-KUBECONFIG"),
    pytest.param(True, None, False, id="current-context-unreachable"),
])
def test_doctor_takes_the_context_it_is_given(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], two_contexts: Path,
        use_flag: bool, context: str | None, reached: bool) -> None:
    monkeypatch.setenv("KUBECONFIG", "" if use_flag else str(two_contexts))
    args = (["--kubeconfig", str(two_contexts)] if use_flag else []) + (
        ["--context", context] if context else [])
    code = doctor(*args)
    output = capsys.readouterr()
    assert (code != 4) == reached, output.err  # 4: the cluster cannot be read
    if reached:
        assert json.loads(output.out), "findings of the real cluster"


def test_doctor_reads_a_merged_kubeconfig_list(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        cluster: LocalCluster, tmp_path: Path) -> None:
    doc = admin(cluster)
    where = write(tmp_path / "where", {
        "apiVersion": "v1", "kind": "Config", "current-context": doc["current-context"],
        "clusters": doc["clusters"], "contexts": doc["contexts"], "users": []})
    who = write(tmp_path / "who", {"apiVersion": "v1", "kind": "Config",
                                   "clusters": [], "contexts": [], "users": doc["users"]})
    monkeypatch.setenv("KUBECONFIG", f"{where}{os.pathsep}{who}")
    assert doctor() != 4, capsys.readouterr().err


PLUGIN = """#!{python}
import json
print(json.dumps({{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {{"token": {token!r}}}}}))
"""


@pytest.fixture
def exec_kubeconfig(cluster: LocalCluster, kube: KubeClient, namespace: str,
                    tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A kubeconfig whose user is an exec plugin printing a token of a new ServiceAccount,
    bound to cluster-admin for the test; and that account's user name."""
    account = "doctor-exec"
    kube.create({"apiVersion": "v1", "kind": "ServiceAccount",
                 "metadata": {"name": account, "namespace": namespace}},
                res=resources.SERVICEACCOUNTS)
    binding = f"{namespace}-doctor-exec"
    kube.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                 "metadata": {"name": binding},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                             "name": "cluster-admin"},
                 "subjects": [{"kind": "ServiceAccount", "name": account,
                               "namespace": namespace}]},
                res=CLUSTERROLEBINDINGS)
    plugin = tmp_path / "credential-plugin"
    plugin.write_text(PLUGIN.format(python=sys.executable,
                                    token=service_account_token(kube, namespace, account)))
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    doc = admin(cluster)
    user = {"name": "plugin", "user": {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin),
        "interactiveMode": "Never"}}}
    context = dict(entry(doc, "contexts"))
    context["context"] = {**context["context"], "user": "plugin"}
    path = write(tmp_path / "exec", {**doc, "users": [user], "contexts": [context]})
    try:
        yield path, f"system:serviceaccount:{namespace}:{account}"
    finally:
        kube.delete(CLUSTERROLEBINDINGS, binding)


def test_an_exec_plugin_kubeconfig_acts_as_what_the_plugin_returns(
        capsys: pytest.CaptureFixture[str], exec_kubeconfig: tuple[Path, str]) -> None:
    path, username = exec_kubeconfig
    review = KubeClient.from_config(from_kubeconfig(path)).create(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
         "metadata": {}},
        res=SELFSUBJECTREVIEWS)
    assert review["status"]["userInfo"]["username"] == username
    assert doctor("--kubeconfig", str(path)) != 2, capsys.readouterr().err

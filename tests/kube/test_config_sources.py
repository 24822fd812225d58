"""Where a kubeconfig's credentials come from, as kubectl finds them: a merged ``KUBECONFIG``
list, a context chosen with or without a path, a ``tokenFile`` that rotates, an exec credential
plugin that is run again once what it returned has expired, and clear errors otherwise."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from functions.kube import config

Obj = dict[str, Any]


@pytest.fixture(autouse=True)
def private_files(monkeypatch: pytest.MonkeyPatch) -> config._PrivateFiles:
    """A fresh set of private files per test, which leaves the process's own alone."""
    files = config._PrivateFiles()
    monkeypatch.setattr(config, "PRIVATE_FILES", files)
    return files


def write(path: Path, *, clusters: list[Obj] = (), users: list[Obj] = (),  # type: ignore[assignment]
          contexts: list[Obj] = (), current: str | None = None) -> Path:  # type: ignore[assignment]
    doc: Obj = {"apiVersion": "v1", "kind": "Config", "clusters": list(clusters),
                "users": list(users), "contexts": list(contexts)}
    if current:
        doc["current-context"] = current
    path.write_text(yaml.safe_dump(doc))
    return path


def cluster(name: str, server: str) -> Obj:
    return {"name": name, "cluster": {"server": server}}


def user(name: str, **fields: Any) -> Obj:
    return {"name": name, "user": fields}


def context(name: str, cluster_name: str, user_name: str) -> Obj:
    return {"name": name, "context": {"cluster": cluster_name, "user": user_name}}


@pytest.fixture
def two_files(tmp_path: Path) -> str:
    """``a`` holds the clusters, contexts and current context, ``b`` the users and a context
    of the same name as one in ``a`` (which the first file wins)."""
    a = write(tmp_path / "a", clusters=[cluster("one", "https://one:6443"),
                                        cluster("two", "https://two:6443")],
              contexts=[context("first", "one", "alice"), context("second", "two", "bob")],
              current="first")
    b = write(tmp_path / "b", users=[user("alice", token="alice-token"),
                                     user("bob", token="bob-token")],
              contexts=[context("first", "two", "bob")], current="second")
    return f"{a}{os.pathsep}{b}"


@pytest.mark.parametrize(("context_name", "server", "token"), [
    pytest.param(None, "https://one:6443", "alice-token", id="current-context-of-the-first"),
    pytest.param("second", "https://two:6443", "bob-token", id="named-context"),
])
def test_a_kubeconfig_list_is_merged_as_kubectl_merges_it(
        monkeypatch: pytest.MonkeyPatch, two_files: str, context_name: str | None,
        server: str, token: str) -> None:
    monkeypatch.setenv("KUBECONFIG", two_files)
    for loaded in (config.from_kubeconfig(None, context_name),
                   config.from_kubeconfig(two_files, context_name)):
        assert (loaded.server, loaded.bearer_token()) == (server, token)
    if context_name is None:
        assert config.load().server == server


def test_a_context_is_chosen_without_a_path(monkeypatch: pytest.MonkeyPatch,
                                            two_files: str) -> None:
    monkeypatch.setenv("KUBECONFIG", two_files)
    assert config.from_kubeconfig(context="second").server == "https://two:6443"


def test_a_token_file_is_read_again_on_refresh(tmp_path: Path) -> None:
    (tmp_path / "tokens").mkdir()
    token = tmp_path / "tokens" / "token"
    token.write_text("first\n")
    path = write(tmp_path / "kubeconfig", clusters=[cluster("c", "https://c:6443")],
                 users=[user("u", tokenFile="tokens/token")],
                 contexts=[context("c", "c", "u")], current="c")
    loaded = config.from_kubeconfig(path)
    assert loaded.bearer_token() == "first"
    token.write_text("rotated\n")
    assert loaded.bearer_token() == "rotated"


PLUGIN = """#!{python}
import json, os, sys
calls = os.path.join(os.path.dirname(sys.argv[0]), "calls")
count = int(open(calls).read()) + 1 if os.path.exists(calls) else 1
open(calls, "w").write(str(count))
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
assert info["apiVersion"] == "client.authentication.k8s.io/v1beta1", info
if os.environ.get("PLUGIN_FAIL"):
    sys.exit("cannot log in")
status = {{"token": "exec-token-%d" % count}}
if os.environ.get("PLUGIN_EXPIRED"):
    status["expirationTimestamp"] = "2000-01-01T00:00:00Z"
print(json.dumps({{"apiVersion": "client.authentication.k8s.io/v1beta1",
                  "kind": "ExecCredential", "status": status}}))
"""


def exec_kubeconfig(tmp_path: Path, env: list[Obj] | None = None) -> Path:
    plugin = tmp_path / "plugin"
    plugin.write_text(PLUGIN.format(python=sys.executable))
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    exec_config: Obj = {"apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": str(plugin), "args": ["--flag"],
                        "interactiveMode": "Never"}
    if env:
        exec_config["env"] = env
    return write(tmp_path / "kubeconfig", clusters=[cluster("c", "https://c:6443")],
                 users=[user("u", exec=exec_config)], contexts=[context("c", "c", "u")],
                 current="c")


def calls(tmp_path: Path) -> int:
    return int((tmp_path / "calls").read_text())


def test_an_exec_plugin_gives_the_token(tmp_path: Path,
                                        private_files: config._PrivateFiles) -> None:
    loaded = config.from_kubeconfig(exec_kubeconfig(tmp_path))
    directory = private_files.directory()
    assert directory is not None and stat.S_IMODE(directory.stat().st_mode) == 0o700, (
        "what the plugin may return as certificate data goes to a private directory")
    assert loaded.bearer_token() == "exec-token-1"
    assert loaded.bearer_token() == "exec-token-1", "not run again while it has not expired"
    assert calls(tmp_path) == 1


def test_an_exec_plugin_is_run_again_once_its_token_expired(tmp_path: Path) -> None:
    loaded = config.from_kubeconfig(exec_kubeconfig(
        tmp_path, env=[{"name": "PLUGIN_EXPIRED", "value": "1"}]))
    assert loaded.token == "exec-token-1"
    assert loaded.bearer_token() == "exec-token-2"
    assert calls(tmp_path) == 2


def test_an_exec_plugin_that_fails_is_a_config_error_naming_it(tmp_path: Path) -> None:
    path = exec_kubeconfig(tmp_path, env=[{"name": "PLUGIN_FAIL", "value": "1"}])
    with pytest.raises(config.ConfigError, match="exec credential plugin"):
        config.from_kubeconfig(path)


@pytest.mark.parametrize(("doc", "match"), [
    pytest.param({"clusters": [cluster("c", "https://c")], "users": [user("u", token="t")],
                  "contexts": [context("c", "c", "u")]}, "no current-context",
                 id="no-current-context"),
    pytest.param({"clusters": [cluster("c", "https://c")], "users": [user("u", token="t")],
                  "contexts": [context("c", "c", "u")], "current": "other"}, "other",
                 id="unknown-context"),
    pytest.param({"clusters": [], "users": [user("u", token="t")],
                  "contexts": [context("c", "gone", "u")], "current": "c"}, "no cluster",
                 id="context-names-a-missing-cluster"),
    pytest.param({"clusters": [cluster("c", "https://c")],
                  "users": [user("u", username="a", password="b")],
                  "contexts": [context("c", "c", "u")], "current": "c"}, "password",
                 id="basic-auth"),
])
def test_an_unusable_kubeconfig_is_a_config_error(tmp_path: Path, doc: Obj,
                                                  match: str) -> None:
    path = write(tmp_path / "kubeconfig", **doc)
    with pytest.raises(config.ConfigError, match=match):
        config.from_kubeconfig(path)


def test_no_kubeconfig_where_named_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(config.ConfigError, match="no kubeconfig found"):
        config.from_kubeconfig(tmp_path / "missing")


def test_the_loader_writes_no_file_for_inline_data(tmp_path: Path) -> None:
    """Inline data become private memory files before the loader sees them: no private
    directory is made (the loader would otherwise write temporary files)."""
    path = write(tmp_path / "kubeconfig",
                 clusters=[{"name": "c", "cluster": {"server": "https://c",
                                                     "certificate-authority-data": "Y2E="}}],
                 users=[user("u", token="t")], contexts=[context("c", "c", "u")], current="c")
    loaded = config.from_kubeconfig(path)
    assert loaded.ca_file is not None and Path(loaded.ca_file).read_bytes() == b"ca"
    assert config.PRIVATE_FILES.directory() is None


IN_CLUSTER = """import sys
from pathlib import Path
from functions.kube import config
config.SERVICE_ACCOUNT_DIR = Path(sys.argv[1])
loaded = config.load()
assert loaded.source == "in-cluster" and loaded.bearer_token() == "pod-token", loaded
print(sorted(name for name in sys.modules if name.split(".")[0] == "kubernetes"))
"""


def test_a_function_in_a_cluster_never_imports_the_kubeconfig_loader(tmp_path: Path) -> None:
    """The in-cluster service account is read by a loader of our own: a cold function pod
    does not pay the kubernetes package's import (0.2 s and some 38 MiB)."""
    (tmp_path / "token").write_text("pod-token\n")
    (tmp_path / "ca.crt").write_text("ca")
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env.update(KUBERNETES_SERVICE_HOST="10.96.0.1", KUBERNETES_SERVICE_PORT="443",
               HOME=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", IN_CLUSTER, str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"

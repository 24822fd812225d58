"""The ``jobs`` CLI against the local cluster in both modes: through the training API (served
by gunicorn, reached with the kubeconfig's own token) and directly on the job CRs as the
kubeconfig's user. Every output format of ``list`` and ``get``, the namespace from the
context, ``-A``, ``watch``'s exit codes, ``delete``, a TrainJob, and a user without RBAC."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from devstack.cluster.ports import free_port
from devstack.cluster.runner import LocalCluster
from functions.__main__ import main
from functions.kube import resources
from functions.kube.client import KubeClient
from tests.api.conftest import JOB_RULES, grant, mint_token
from tests.support import REPO, wait_for

Obj = dict[str, Any]
# alice's role: the API's users' rules, and the pods her logs are read from (direct mode)
RULES = [*JOB_RULES, {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
HEADER = ["NAME", "FRAMEWORK", "STATE", "QUEUE", "REPLICAS", "AGE"]
WIDE = [*HEADER, "KIND", "PRIORITY", "FAILED", "REASON"]


def jobs(*argv: str) -> tuple[int, str, str]:
    """``jobs ARGV`` in this process: its exit code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with (pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out),
          contextlib.redirect_stderr(err)):
        for name in ("TRAINING_API_URL", "TRAINING_API_TOKEN", "TRAINING_API_TOKEN_FILE"):
            patch.delenv(name, raising=False)
        try:
            code = main(["jobs", *argv])
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def kubeconfig(cluster: LocalCluster, path: Path, *, namespace: str | None = None,
               token: str | None = None, ca: bool = True) -> Path:
    """The admin's kubeconfig, with the context's ``namespace``, a ``token`` user in place of
    the admin's certificate, or no CA (a server no one can verify)."""
    doc = yaml.safe_load(cluster.kubeconfig.read_text())
    if namespace:
        doc["contexts"][0]["context"]["namespace"] = namespace
    if token:
        doc["users"][0]["user"] = {"token": token}
    if not ca:
        doc["clusters"][0]["cluster"].pop("certificate-authority-data")
    path.write_text(yaml.safe_dump(doc))
    return path


def set_status(kube: KubeClient, namespace: str, name: str, condition: str) -> None:
    """What the job controllers would write of a job that ended so (none run here)."""
    counts = {"succeeded": 1} if condition == "Succeeded" else {"failed": 1}
    kube.patch(resources.PYTORCHJOBS, name, {"status": {
        "conditions": [{"type": condition, "status": "True", "reason": f"PyTorchJob{condition}",
                        "message": f"it {condition.lower()}",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        "replicaStatuses": {"Master": counts}}}, namespace, subresource="status")


@dataclass(frozen=True)
class World:
    namespace: str
    alice: Path   # a token user with the training role in ``namespace``, its context's
    admin: Path   # the admin, with no namespace in its context
    url: str      # the training API

    def flags(self, mode: str) -> list[str]:
        """Alice's flags in ``mode``: the kubeconfig alone, and the API's URL (her
        kubeconfig's token is what the API reviews)."""
        return ["--kubeconfig", str(self.alice), *(["--url", self.url] if mode == "api" else [])]


def serve_api(cluster: LocalCluster) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "PORT": str(port)}
    process = subprocess.Popen([sys.executable, "-m", "functions", "serve", "api",
                                "--host", "127.0.0.1"], cwd=REPO, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/health/readiness", timeout=1) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False
    wait_for(up, timeout=30, message="the API under gunicorn")
    return process, url


@pytest.fixture(scope="module")
def world(cluster: LocalCluster, kube: KubeClient, crds: None,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """A namespace with three jobs, submitted through the CLI in both modes: ``mnist``
    (queued), ``done`` (succeeded) and ``broken`` (failed)."""
    namespace = f"cli-{uuid.uuid4().hex[:8]}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
                res=resources.NAMESPACES)
    directory = tmp_path_factory.mktemp("cli")
    token = mint_token(kube, namespace, "alice")
    grant(kube, namespace, namespace, "alice", RULES)
    process, url = serve_api(cluster)
    try:
        here = World(namespace, kubeconfig(cluster, directory / "alice", namespace=namespace,
                                           token=token),
                     kubeconfig(cluster, directory / "admin"), url)
        wait_for(lambda: jobs("list", *here.flags("api"))[0] == 0, timeout=20,
                 message="alice's role to take effect")
        for mode, name in (("direct", "mnist"), ("api", "done"), ("direct", "broken")):
            code, out, err = jobs("submit", name, "--image", "example.com/train:1",
                                  *here.flags(mode))
            assert code == 0, err
            assert out.startswith(f"PyTorchJob {name} submitted: Queued"), out
        set_status(kube, namespace, "done", "Succeeded")
        set_status(kube, namespace, "broken", "Failed")
        yield here
    finally:
        process.terminate()
        process.wait(timeout=20)
        kube.delete(resources.NAMESPACES, namespace)


def rows(out: str) -> list[list[str]]:
    """A table's cells (cut where the header's columns start: a cell may hold a space), AGE
    (which moves on) left out."""
    lines = out.splitlines()
    starts = [i for i, c in enumerate(lines[0]) if c != " " and (i == 0 or lines[0][i - 1] == " ")]
    cells = [[line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
             for line in lines]
    age = cells[0].index("AGE")
    return [row[:age] + row[age + 1:] for row in cells]


def names(fmt: str, out: str) -> list[tuple[str, str]]:
    """(name, state) of each job of a json or yaml document."""
    data = json.loads(out) if fmt == "json" else yaml.safe_load(out)
    items = data.get("items", [data])
    return [(item["name"], item["state"]) for item in items]


MNIST_QUEUE = {"api": "#1 p0", "direct": "queued p0"}


@pytest.mark.parametrize("mode", [pytest.param("api", id="api"),
                                  pytest.param("direct", id="direct")])
@pytest.mark.parametrize("fmt", [pytest.param(f, id=f) for f in
                                 ("text", "wide", "json", "yaml", "name")])
def test_list_prints_every_format_in_both_modes(world: World, mode: str, fmt: str) -> None:
    code, out, err = jobs("list", "-o", fmt, *world.flags(mode))  # -n from the context
    assert code == 0, err
    if fmt == "text":
        assert rows(out) == [HEADER[:-1], ["broken", "pytorch", "Failed", "-", "0/1"],
                             ["done", "pytorch", "Succeeded", "-", "1/1"],
                             ["mnist", "pytorch", "Queued", MNIST_QUEUE[mode], "0/1"]]
    elif fmt == "wide":
        assert rows(out) == [
            WIDE[:5] + WIDE[6:],
            ["broken", "pytorch", "Failed", "-", "0/1", "PyTorchJob", "0", "1",
             "PyTorchJobFailed"],
            ["done", "pytorch", "Succeeded", "-", "1/1", "PyTorchJob", "0", "0",
             "PyTorchJobSucceeded"],
            ["mnist", "pytorch", "Queued", MNIST_QUEUE[mode], "0/1", "PyTorchJob", "0", "0",
             "-"]]
    elif fmt == "name":
        assert out.splitlines() == [f"pytorchjob.kubeflow.org/{n}"
                                    for n in ("broken", "done", "mnist")]
    else:
        assert names(fmt, out) == [("broken", "Failed"), ("done", "Succeeded"),
                                   ("mnist", "Queued")]


@pytest.mark.parametrize("mode", [pytest.param("api", id="api"),
                                  pytest.param("direct", id="direct")])
@pytest.mark.parametrize(("fmt", "first_line"), [
    pytest.param("text", "done PyTorchJob Succeeded", id="text"),
    pytest.param("wide", " ".join(WIDE), id="wide"),
    pytest.param("json", "{", id="json"),
    pytest.param("yaml", "name: done", id="yaml"),
    pytest.param("name", "pytorchjob.kubeflow.org/done", id="name"),
])
def test_get_prints_every_format_in_both_modes(world: World, mode: str, fmt: str,
                                               first_line: str) -> None:
    code, out, err = jobs("get", "done", "-o", fmt, *world.flags(mode))
    assert code == 0, err
    assert " ".join(out.splitlines()[0].split()) == first_line
    if fmt in ("json", "yaml"):
        assert names(fmt, out) == [("done", "Succeeded")]
    if fmt == "text":
        assert "- Succeeded=True PyTorchJobSucceeded: it succeeded" in out


def test_both_modes_print_the_same_job_documents(world: World) -> None:
    through_api = json.loads(jobs("list", "-o", "json", *world.flags("api"))[1])["items"]
    direct = json.loads(jobs("list", "-o", "json", *world.flags("direct"))[1])["items"]
    for one in (through_api, direct):  # only the API knows the queue's order
        one[-1]["queue"]["position"] = None
    assert through_api == direct
    assert [j["name"] for j in direct] == ["broken", "done", "mnist"]
    assert direct[-1]["queue"]["admission"] == "queue"


@pytest.mark.parametrize(("who", "flags", "code", "expected"), [
    pytest.param("admin", ["-A"], 0, "NAMESPACE", id="admin-all-namespaces"),
    pytest.param("admin", [], 0, "No training jobs found in namespace default.",
                 id="admin-context-without-namespace-is-default"),
    pytest.param("admin", ["-n", "{ns}"], 0, "done", id="admin-namespace-flag"),
    pytest.param("alice", ["-A"], 1, "forbidden: your user may not list training jobs in all "
                                     "namespaces (ask for the training role)",
                 id="alice-all-namespaces-forbidden"),
])
def test_namespaces_as_kubectl_takes_them(world: World, who: str, flags: list[str], code: int,
                                          expected: str) -> None:
    config = world.admin if who == "admin" else world.alice
    argv = ["list", "--kubeconfig", str(config),
            *(f.format(ns=world.namespace) for f in flags)]
    found, out, err = jobs(*argv)
    assert found == code, err
    assert expected in out + err
    if flags == ["-A"] and code == 0:
        mine = [row[1:3] for row in rows(out)[1:] if row[0] == world.namespace]
        assert mine == [["broken", "pytorch"], ["done", "pytorch"], ["mnist", "pytorch"]]


@pytest.mark.parametrize("mode", [pytest.param("api", id="api"),
                                  pytest.param("direct", id="direct")])
@pytest.mark.parametrize(("argv", "code", "said"), [
    pytest.param(["done"], 0, "1/1 finished", id="succeeded-0"),
    pytest.param(["done", "broken"], 1, "2/2 finished", id="one-failed-1"),
    pytest.param(["ghost"], 1, "not found: ghost", id="not-found-1"),
    pytest.param(["mnist", "--timeout", "0.3"], 3, "timed out after 0.3 s", id="timed-out-3"),
    pytest.param(["done", "-o", "name"], 0, "pytorchjob.kubeflow.org/done", id="name-stream"),
    pytest.param(["done", "-o", "wide"], 0, "PyTorchJobSucceeded", id="wide-frame"),
])
def test_watch_exit_codes(world: World, mode: str, argv: list[str], code: int,
                          said: str) -> None:
    found, out, err = jobs("watch", *argv, "--interval", "0.1", "--plain", *world.flags(mode))
    assert found == code, err
    assert said in out + err


@pytest.mark.parametrize("mode", [pytest.param("api", id="api"),
                                  pytest.param("direct", id="direct")])
def test_delete_and_then_not_found(world: World, mode: str) -> None:
    name = f"scratch-{mode}"
    assert jobs("submit", name, "--image", "i:1", *world.flags(mode))[0] == 0
    assert jobs("delete", name, "-o", "name", *world.flags(mode))[:2] == (
        0, f"pytorchjob.kubeflow.org/{name}\n")
    code, _, err = jobs("get", name, *world.flags(mode))
    assert code == 1 and err.count("\n") == 1
    assert ("(404); check the name and -n" if mode == "api" else
            f"not found: no training job {name} in namespace {world.namespace}") in err


@pytest.mark.parametrize(("argv", "code", "said"), [
    pytest.param(["submit", "x", "--image", "i", "--workers", "0"], 1,
                 "invalid request: workers (422): workers: Input should be greater than or "
                 "equal to 1", id="invalid-request"),
    pytest.param(["submit", "done", "--image", "i"], 1, "conflict: a PyTorchJob named done "
                                                        "exists", id="name-taken"),
    pytest.param(["logs", "mnist"], 1, "job mnist has no master pod 0 (yet)", id="no-pod-yet"),
])
def test_direct_mode_failures_say_what_to_do(world: World, argv: list[str], code: int,
                                             said: str) -> None:
    found, _, err = jobs(*argv, *world.flags("direct"))
    assert (found, err.count("\n")) == (code, 1), err
    assert said in err


def test_direct_mode_writes_the_cr_the_api_would(world: World, kube: KubeClient) -> None:
    """Queued and suspended, with the submitter the API server names."""
    mnist = kube.get(resources.PYTORCHJOBS, "mnist", world.namespace)
    done = kube.get(resources.PYTORCHJOBS, "done", world.namespace)
    assert mnist is not None and done is not None
    assert mnist["spec"] == done["spec"]
    assert mnist["metadata"]["labels"] == done["metadata"]["labels"]
    annotations = mnist["metadata"]["annotations"]
    assert annotations["training.opendatahub.io/submitted-by"] == (
        f"system:serviceaccount:{world.namespace}:alice")
    assert mnist["metadata"]["managedFields"][0]["manager"] == "odh-training-cli"


def test_trainjobs_directly(cluster: LocalCluster, namespace: str, trainer_crds: None,
                            tmp_path: Path) -> None:
    flags = ["--kubeconfig", str(kubeconfig(cluster, tmp_path / "admin", namespace=namespace))]
    code, out, err = jobs("submit", "llm", "--runtime", "torch-distributed", "--image", "i:1",
                          "--nodes", "2", *flags)
    assert (code, out) == (0, "TrainJob llm submitted: Queued\n"), err
    assert jobs("get", "llm", "-o", "name", *flags)[1] == "trainjob.trainer.kubeflow.org/llm\n"
    assert rows(jobs("list", *flags)[1])[1] == ["llm", "trainjob", "Queued", "queued p0", "0/0"]
    code, _, err = jobs("submit", "x", "--runtime", "torch-distributd", "--image", "i:1", *flags)
    assert code == 1 and "no ClusterTrainingRuntime named torch-distributd" in err
    assert jobs("delete", "llm", *flags)[:2] == (0, "llm deleted\n")


# -- the kubectl plugin, through the real kubectl ------------------------------------------------

SCRIPTS = Path(sys.executable).parent  # kubectl-training sits beside the interpreter


@pytest.mark.parametrize(("config", "argv", "code", "said"), [
    pytest.param("alice", ["list"], 0, "mnist", id="list-0"),
    pytest.param("alice", ["get", "done", "-o", "name"], 0, "pytorchjob.kubeflow.org/done",
                 id="get-name-0"),
    pytest.param("bob", ["submit", "x", "--image", "i:1", "-n", "{ns}"], 1,
                 "forbidden: your user may not create pytorchjobs in {ns} (ask for the training "
                 "role)", id="forbidden-1"),
    pytest.param("alice", ["list", "-o", "table"], 2, "invalid choice", id="usage-2"),
    pytest.param("alice", ["watch", "mnist", "--timeout", "0.2", "--interval", "0.1"], 3,
                 "timed out", id="timed-out-3"),
    pytest.param("absent", ["list"], 4, "no kubeconfig: set KUBECONFIG or pass --kubeconfig",
                 id="no-kubeconfig-4"),
    pytest.param("no-ca", ["list", "-n", "{ns}"], 4, "CERTIFICATE_VERIFY_FAILED",
                 id="tls-unverified-4"),
])
def test_kubectl_runs_the_plugin(cluster: LocalCluster, bin_dir: Path, world: World,
                                 tmp_path: Path, config: str, argv: list[str], code: int,
                                 said: str) -> None:
    path = {"alice": world.alice, "absent": tmp_path / "absent",
            "bob": cluster.user_kubeconfig("bob"),
            "no-ca": kubeconfig(cluster, tmp_path / "no-ca", ca=False)}[config]
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("TRAINING_API")},
           "PATH": f"{SCRIPTS}{os.pathsep}{os.environ['PATH']}", "KUBECONFIG": str(path),
           "HOME": str(tmp_path)}
    done = subprocess.run([str(bin_dir / "kubectl"), "training",
                           *(a.format(ns=world.namespace) for a in argv)],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == code, done.stderr
    assert said.format(ns=world.namespace) in done.stdout + done.stderr
    if code == 0 and argv[0] == "get":  # kubectl takes the reference back
        again = subprocess.run([str(bin_dir / "kubectl"), "get", done.stdout.strip(), "-o",
                                "name", "-n", world.namespace], capture_output=True, text=True,
                               env={**env, "KUBECONFIG": str(world.admin)}, timeout=60,
                               check=False)
        assert again.stdout == done.stdout, again.stderr
    if code == 0 and argv == ["list"]:
        assert rows(done.stdout) == rows(jobs("list", *world.flags("direct"))[1])


def test_insecure_skip_tls_verify_reaches_a_server_no_one_can_verify(
        cluster: LocalCluster, world: World, tmp_path: Path) -> None:
    no_ca = kubeconfig(cluster, tmp_path / "no-ca", namespace=world.namespace)
    no_ca.write_text(no_ca.read_text().replace("certificate-authority-data", "unused"))
    assert jobs("get", "done", "--kubeconfig", str(no_ca), "-o", "name")[0] == 4
    code, out, err = jobs("get", "done", "--kubeconfig", str(no_ca), "-o", "name",
                          "--insecure-skip-tls-verify")
    assert (code, out, err) == (0, "pytorchjob.kubeflow.org/done\n", "")  # no warnings

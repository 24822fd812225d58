"""The ``jobs`` command line without a cluster: the ``submit`` flags into API requests, usage
errors, the names the console scripts show, where the kubeconfig sends each mode, and the
exit codes of failures to reach anything (the real app serves the API-mode ones)."""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from werkzeug.serving import WSGIRequestHandler, make_server

from functions.__main__ import build_parser, main
from functions.api import cli, connect
from functions.api.app import create_api_app
from functions.api.client import ApiClientError, TrainingApi
from functions.api.direct import DirectJobs
from functions.api.exits import ExitCode
from functions.kube.transport import HttpTransport
from tests.api.test_fuzz import no_client
from tests.kube.test_transport_tls import tls_server
from tests.support import REPO

Obj = dict[str, Any]
SCRIPTS = Path(sys.executable).parent  # console scripts sit beside the interpreter


def submitted(*flags: str) -> Obj:
    argv = ["jobs", "submit", *flags]
    return cli._request(build_parser(argv).parse_args(argv))


@pytest.mark.parametrize(("flags", "expected"), [
    pytest.param(("mnist", "--image", "i:1"),
                 {"name": "mnist", "image": "i:1", "priority": 0, "framework": "pytorch",
                  "workers": 1}, id="default-pytorch"),
    pytest.param(("mnist", "--image", "i:1", "--framework", "mpi", "--workers", "3"),
                 {"name": "mnist", "image": "i:1", "priority": 0, "framework": "mpi",
                  "workers": 3}, id="v1-framework"),
    pytest.param(("llm", "--image", "i:1", "--runtime", "torch-distributed"),
                 {"name": "llm", "image": "i:1", "priority": 0, "runtime": "torch-distributed",
                  "numNodes": 1}, id="trainjob-one-node"),
    pytest.param(("llm", "--image", "i:1", "--runtime", "torch-distributed", "--nodes", "4",
                  "--gpus", "2", "--env", "A=1", "--command", "torchrun", "t.py"),
                 {"name": "llm", "image": "i:1", "priority": 0, "runtime": "torch-distributed",
                  "numNodes": 4, "resources": {"gpus": 2}, "env": {"A": "1"},
                  "command": ["torchrun", "t.py"]}, id="trainjob-nodes-gpus-env-command"),
])
def test_submit_flags_make_the_request(flags: tuple[str, ...], expected: Obj) -> None:
    assert submitted(*flags) == expected


def code_of(argv: list[str]) -> int:
    """The exit code of ``argv``, argparse's (a ``SystemExit``) or the command's."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


@pytest.mark.parametrize(("argv", "message"), [
    pytest.param(["submit", "llm", "--image", "i", "--runtime", "r", "--framework", "pytorch"],
                 "not both", id="framework-and-runtime"),
    pytest.param(["submit", "mnist", "--image", "i", "--nodes", "2"],
                 "--nodes is for a TrainJob", id="nodes-without-runtime"),
    pytest.param(["submit", "llm", "--runtime", "r"], "needs NAME and --image", id="no-image"),
    pytest.param(["submit", "x", "--image", "i", "--env", "NOEQUALS"], "KEY=VALUE",
                 id="env-without-value"),
    pytest.param(["watch", "a", "-A"], "names or -A", id="watch-names-across-namespaces"),
    pytest.param(["list", "-A", "--url", "http://127.0.0.1:9"], "-A needs direct mode",
                 id="all-namespaces-through-the-api"),
    pytest.param(["list", "-o", "table"], "invalid choice", id="unknown-output"),
    pytest.param(["delete", "x", "-o", "json"], "invalid choice", id="delete-prints-no-object"),
    pytest.param(["get"], "required: name", id="get-without-name"),
    pytest.param(["list", "--state", "Done"], "invalid choice", id="unknown-state"),
    pytest.param(["logs", "x", "-A"], "unrecognized arguments: -A", id="logs-one-namespace"),
    pytest.param(["list", "--url", "ftp://api", "--token", "t", "-n", "a"],
                 "not an http:// or https:// address", id="url-scheme"),
])
def test_usage_errors_exit_2_before_any_request(
        argv: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "config")))  # port 9
    monkeypatch.delenv("TRAINING_API_URL", raising=False)
    assert code_of(["jobs", *argv]) == ExitCode.USAGE
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("command", "usage"), [
    pytest.param([str(SCRIPTS / "odh-training-jobs"), "--help"],
                 "usage: odh-training-jobs [-h] [--version] ACTION", id="odh-training-jobs"),
    pytest.param([str(SCRIPTS / "odh-training-jobs"), "list", "--help"],
                 "usage: odh-training-jobs list [-h]", id="odh-training-jobs-list"),
    pytest.param([str(SCRIPTS / "kubectl-training"), "--help"],
                 "usage: kubectl training [-h] [--version] ACTION", id="kubectl-training"),
    pytest.param([str(SCRIPTS / "kubectl-training"), "watch", "--help"],
                 "usage: kubectl training watch [-h]", id="kubectl-training-watch"),
    pytest.param([sys.executable, "-m", "functions", "jobs", "--help"],
                 "usage: python -m functions jobs [-h] [--version] ACTION",
                 id="python-m-functions-jobs"),
    pytest.param([str(SCRIPTS / "odh-training"), "doctor", "--help"],
                 "usage: odh-training doctor [-h]", id="odh-training-doctor"),
])
def test_console_scripts_show_their_own_names_and_the_exit_codes(
        command: list[str], usage: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=REPO,
                          timeout=60)
    assert done.stdout.startswith(usage)
    assert "exit codes:" in done.stdout
    assert "3  timed out" in done.stdout and "4  cannot reach" in done.stdout


@pytest.mark.parametrize(("argv", "said"), [
    pytest.param(["--help"], ["your RBAC on the job kinds applies", "the API's checks do not",
                              "capped by the queue instead of refused"], id="jobs"),
    pytest.param(["submit", "--help"], ["your RBAC applies and the API's checks do not",
                                        "the queue caps it"], id="submit"),
    pytest.param(["list", "--help"], ["your RBAC applies and the API's checks do not"],
                 id="list"),
])
def test_help_says_what_direct_mode_checks_and_what_it_does_not(
        capsys: pytest.CaptureFixture[str], argv: list[str], said: list[str]) -> None:
    assert code_of(["jobs", *argv]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert [text for text in said if text not in out] == []


# -- where the kubeconfig sends each mode -------------------------------------------------------

def write_kubeconfig(path: Path, server: str = "https://127.0.0.1:9") -> Path:
    """Two contexts: ``work`` (current, namespace team-a, a token user) and ``bare``
    (no namespace, a user with no token)."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "work",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "alice", "user": {"token": "alice-token"}},
                  {"name": "nobody", "user": {}}],
        "contexts": [{"name": "work", "context": {"cluster": "c", "user": "alice",
                                                  "namespace": "team-a"}},
                     {"name": "bare", "context": {"cluster": "c", "user": "nobody"}}]}))
    return path


def parsed(*argv: str) -> argparse.Namespace:
    full = ["jobs", *argv]
    return build_parser(full).parse_args(full)


@pytest.mark.parametrize(("argv", "env", "mode", "namespace", "token"), [
    pytest.param(["list"], {}, "direct", "team-a", "alice-token", id="direct-context-namespace"),
    pytest.param(["list", "-n", "other"], {}, "direct", "other", "alice-token",
                 id="direct-flag-namespace"),
    pytest.param(["list", "--context", "bare"], {}, "direct", "default", None,
                 id="direct-context-without-namespace"),
    pytest.param(["list", "-A"], {}, "direct", None, "alice-token", id="direct-all-namespaces"),
    pytest.param(["list", "--token", "mine"], {}, "direct", "team-a", "mine",
                 id="direct-token-flag-replaces-the-kubeconfigs"),
    pytest.param(["get", "x", "--url", "http://api"], {}, "api", "team-a", "alice-token",
                 id="api-kubeconfig-token-and-namespace"),
    pytest.param(["get", "x"], {"TRAINING_API_URL": "http://api",
                                "TRAINING_API_TOKEN": "env-token"},
                 "api", "team-a", "env-token", id="api-environment"),
    pytest.param(["get", "x", "--url", "http://api", "--token", "flag", "-n", "b"],
                 {"TRAINING_API_TOKEN": "env-token"}, "api", "b", "flag",
                 id="api-flags-win"),
])
def test_the_kubeconfig_gives_the_namespace_and_the_credentials(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str], env: dict[str, str],
        mode: str, namespace: str | None, token: str | None) -> None:
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "config")))
    for name in ("TRAINING_API_URL", "TRAINING_API_TOKEN", "TRAINING_API_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    target = connect.connect(parsed(*argv))
    assert (target.mode, target.namespace) == (mode, namespace)
    jobs = target.jobs
    if mode == "api":
        assert isinstance(jobs, TrainingApi) and jobs.namespace == namespace
        transport = jobs.transport
    else:
        assert isinstance(jobs, DirectJobs) and jobs.namespace == namespace
        assert isinstance(jobs.kube.transport, HttpTransport)
        transport = jobs.kube.transport
    assert transport._token == token


def test_a_token_file_is_read_and_a_missing_one_is_a_usage_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "config")))
    (tmp_path / "token").write_text("from-file\n")
    target = connect.connect(parsed("list", "--url", "http://api", "--token-file",
                                    str(tmp_path / "token")))
    assert isinstance(target.jobs, TrainingApi)
    assert target.jobs.transport._token == "from-file"
    assert code_of(["jobs", "list", "--url", "http://api", "--token-file",
                    str(tmp_path / "absent")]) == ExitCode.USAGE
    assert "cannot read the token file" in capsys.readouterr().err


# -- exit code 4: nothing to reach, or nothing answering ----------------------------------------

class QuietHandler(WSGIRequestHandler):
    def log(self, type: str, message: str, *args: Any) -> None:
        """Access lines would land in the stderr the CLI's test reads."""


@pytest.fixture
def unavailable_api() -> Iterator[str]:
    """The real training API app with no way to the cluster (it answers 503).

    The server shares the test's stderr, so it logs nothing there: a test that configured
    logging earlier would otherwise put werkzeug's access line before the CLI's one line.
    """
    server = make_server("127.0.0.1", 0, create_api_app(kube_factory=no_client), threaded=True,
                         request_handler=QuietHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()


@pytest.mark.parametrize(("case", "argv", "message"), [
    pytest.param("no-kubeconfig", ["list"], "no kubeconfig: set KUBECONFIG or pass --kubeconfig",
                 id="no-kubeconfig"),
    pytest.param("no-kubeconfig", ["list", "--kubeconfig", "{tmp}/absent"],
                 "no kubeconfig at", id="no-kubeconfig-at-the-path"),
    pytest.param("kubeconfig", ["list", "--context", "nope"], "nope",
                 id="unknown-context"),
    pytest.param("kubeconfig", ["get", "x"], "cannot reach the cluster", id="cluster-refused"),
    pytest.param("kubeconfig", ["get", "x", "--url", "http://127.0.0.1:9"],
                 "cannot reach the training API at http://127.0.0.1:9", id="api-refused"),
    pytest.param("kubeconfig", ["get", "x", "--url", "{tls}"], "CERTIFICATE_VERIFY_FAILED",
                 id="api-tls-unverified"),
    pytest.param("kubeconfig", ["get", "x", "--url", "{api}"],
                 "no kubeconfig and not in a cluster (503); try again",
                 id="api-says-the-cluster-is-unavailable"),
    pytest.param("kubeconfig", ["get", "x", "--context", "bare", "--url", "http://api"],
                 "no bearer token", id="api-without-a-token"),
])
def test_what_cannot_be_reached_exits_4_with_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        unavailable_api: str, case: str, argv: list[str], message: str) -> None:
    for name in ("TRAINING_API_URL", "TRAINING_API_TOKEN", "TRAINING_API_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    if case == "kubeconfig":
        monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "config")))
    else:
        monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    (tmp_path / "pki").mkdir()
    with tls_server(tmp_path / "pki", "127.0.0.1") as (port, _):
        values = {"tmp": str(tmp_path), "tls": f"https://127.0.0.1:{port}",
                  "api": unavailable_api}
        assert code_of(["jobs", *(a.format(**values) for a in argv)]) == ExitCode.UNREACHABLE
    err = capsys.readouterr().err
    assert message in err
    assert err.startswith("error: ") and err.count("\n") == 1


@pytest.mark.parametrize(("status", "problem", "is_problem", "code", "line"), [
    pytest.param(401, {"detail": "the bearer token is not valid"}, True, 1,
                 "the bearer token is not valid (401); log in again, or pass --token",
                 id="401"),
    pytest.param(403, {"detail": "bob may not create pytorchjobs in namespace a"}, True, 1,
                 "bob may not create pytorchjobs in namespace a (403); ask for the training role",
                 id="403"),
    pytest.param(404, {"detail": "no job x in namespace a"}, True, 1,
                 "no job x in namespace a (404); check the name and -n", id="404"),
    pytest.param(422, {"detail": "invalid request: workers",
                       "errors": [{"field": "workers", "message": "must be >= 1"}]}, True, 1,
                 "invalid request: workers (422): workers: must be >= 1", id="422-fields"),
    pytest.param(502, {"detail": "no logs from the kubelet"}, True, 1,
                 "no logs from the kubelet (502)", id="502-of-the-api"),
    pytest.param(502, {"detail": "<html>bad gateway</html>"}, False, 4,
                 "<html>bad gateway</html> (502)", id="502-of-a-proxy"),
    pytest.param(503, {"detail": "the cluster is unavailable"}, True, 4,
                 "the cluster is unavailable (503); try again in a moment", id="503"),
])
def test_api_problems_map_to_one_line_and_an_exit_code(
        status: int, problem: Obj, is_problem: bool, code: int, line: str) -> None:
    failure = cli._api_failure(ApiClientError(status, problem, is_problem))
    assert (failure.code, failure.message) == (code, line)

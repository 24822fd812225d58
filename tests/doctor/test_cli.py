"""``python -m functions doctor``: output (``-o text|json``, ``--json``), exit codes, and a
cluster that cannot be read."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from functions.__main__ import main
from functions.doctor import cli, reader
from functions.doctor.core.model import Finding, Snapshot, Status
from tests.doctor.snapshots import deny_all, healthy, with_
from tests.runtime.test_serve import write_kubeconfig


def test_render_prints_details_and_fixes_of_what_did_not_pass() -> None:
    out = io.StringIO()
    cli.render([Finding(check="a", status=Status.PASS, summary="fine", fix="unused"),
                Finding(check="longer", status=Status.FAIL, summary="broken", fix="do this",
                        details=("one", "two"))], out)
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["PASS", "a", "fine"]
    assert lines[1].split() == ["FAIL", "longer", "broken"]
    assert [line.strip() for line in lines[2:5]] == ["- one", "- two", "fix: do this"]
    assert "unused" not in out.getvalue()
    assert lines[-1] == "1 pass, 1 fail"


@pytest.mark.parametrize(("snapshot", "output", "code"), [
    pytest.param(healthy(), ["--json"], 0, id="healthy-json-alias"),
    pytest.param(healthy(), ["-o", "json"], 0, id="healthy-o-json"),
    pytest.param(healthy(), ["-o", "text"], 0, id="healthy-text"),
    pytest.param(healthy(), [], 0, id="healthy-default-text"),
    pytest.param(with_(healthy(), network_policies=(deny_all(),)), ["--json"], 1,
                 id="a-check-fails-json"),
    pytest.param(with_(healthy(), network_policies=(deny_all(),)), ["-o", "text"], 1,
                 id="a-check-fails-text"),
])
def test_exit_code_follows_the_findings(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        snapshot: Snapshot, output: list[str], code: int) -> None:
    seen: list[str] = []

    def fake_read(kube: object, namespace: str) -> Snapshot:
        seen.append(namespace)
        return snapshot

    monkeypatch.setattr(reader, "read", fake_read)
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig")
    assert main(["doctor", "--kubeconfig", str(kubeconfig), "-n", "apps", *output]) == code
    out = capsys.readouterr().out
    assert seen == ["apps"]
    if any("json" in flag for flag in output):
        statuses = {f["status"] for f in json.loads(out)}
    else:
        statuses = {line.split()[0].lower() for line in out.splitlines()[:-1]
                    if line and not line.startswith(" ")}
    assert ("fail" in statuses) is bool(code)


@pytest.mark.parametrize(("kubeconfig", "message"), [
    pytest.param("unreachable", "cannot read the cluster", id="connection-refused"),
    pytest.param("absent", "no kubeconfig at", id="no-kubeconfig-at-the-path"),
    pytest.param(None, "no kubeconfig: set KUBECONFIG or pass --kubeconfig", id="no-kubeconfig"),
])
def test_a_cluster_that_cannot_be_read_is_exit_code_4(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        kubeconfig: str | None, message: str) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    flags = []
    if kubeconfig == "unreachable":  # a port nothing listens on
        flags = ["--kubeconfig", str(write_kubeconfig(tmp_path / "kubeconfig"))]
    elif kubeconfig == "absent":
        flags = ["--kubeconfig", str(tmp_path / "absent")]
    assert main(["doctor", *flags]) == 4
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1

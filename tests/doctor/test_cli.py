"""``python -m functions doctor``: output, exit codes, and an unreachable cluster."""

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


@pytest.mark.parametrize(("snapshot", "code"), [
    pytest.param(healthy(), 0, id="healthy"),
    pytest.param(with_(healthy(), network_policies=(deny_all(),)), 1, id="a-check-fails"),
])
def test_exit_code_follows_the_findings(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        snapshot: Snapshot, code: int) -> None:
    seen: list[str] = []

    def fake_read(kube: object, namespace: str) -> Snapshot:
        seen.append(namespace)
        return snapshot

    monkeypatch.setattr(reader, "read", fake_read)
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig")
    assert main(["doctor", "--kubeconfig", str(kubeconfig), "-n", "apps", "--json"]) == code
    findings = json.loads(capsys.readouterr().out)
    assert seen == ["apps"]
    assert ("fail" in {f["status"] for f in findings}) is bool(code)


def test_an_unreachable_cluster_is_exit_code_2(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig")  # a port nothing listens on
    assert main(["doctor", "--kubeconfig", str(kubeconfig)]) == 2
    assert "cannot read the cluster" in capsys.readouterr().err

"""Bad input to the cluster runner gives one clear error and leaves nothing running."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import yaml

from devstack.cluster import kwok
from devstack.cluster.binaries import BinariesError, check
from devstack.cluster.runner import ClusterError, LocalCluster


def _script(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_missing_binary_names_component_and_fix(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "empty-bin", state_dir=tmp_path / "state")
    with pytest.raises(ClusterError) as error:
        cluster.start(timeout=5)
    message = str(error.value)
    assert message.startswith("etcd: binary not found")
    assert "make testbin" in message and "KUBEBUILDER_ASSETS" in message
    assert not (tmp_path / "state").exists()


def test_component_exiting_early_reports_its_log_and_stops_the_rest(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pid_file = tmp_path / "etcd.pid"
    # A stand-in etcd that answers its health check, so the next component gets its turn.
    (tmp_path / "fake_etcd.py").write_text(
        "import http.server, re, sys\n"
        "port = int(re.search(r'client-urls=http://127.0.0.1:(\\d+)', ' '.join(sys.argv))[1])\n"
        "class Ok(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200); self.end_headers()\n"
        "http.server.HTTPServer(('127.0.0.1', port), Ok).serve_forever()\n")
    _script(bin_dir / "etcd",
            f'echo $$ > {pid_file}; exec python3 {tmp_path / "fake_etcd.py"} "$@"')
    _script(bin_dir / "kube-apiserver",
            "echo 'listen tcp 127.0.0.1:6443: bind: address already in use' >&2; exit 3")
    cluster = LocalCluster(bin_dir, state_dir=tmp_path / "state")
    with pytest.raises(ClusterError) as error:
        cluster.start(timeout=10)
    message = str(error.value)
    assert message.startswith("kube-apiserver exited early with code 3")
    assert "kube-apiserver.log" in message
    assert "address already in use" in message and "port it needs is in use" in message
    etcd_pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(etcd_pid, 0)


def test_check_lists_every_missing_binary(tmp_path: Path) -> None:
    _script(tmp_path / "etcd", "exit 0")
    with pytest.raises(BinariesError) as error:
        check(tmp_path)
    assert "kube-apiserver, kube-controller-manager, kube-scheduler, kwok" in str(error.value)


@pytest.mark.parametrize(("result", "phase", "code"), [
    pytest.param("succeed", "Succeeded", "0", id="succeed"),
    pytest.param("fail", "Failed", "1", id="fail"),
])
def test_finish_stage_selects_label_and_sets_phase(result: str, phase: str, code: str) -> None:
    stage = kwok.finish_stage(result)
    assert f"values: ['{result}']" in stage
    assert f"phase: {phase}" in stage
    assert f'"{kwok.EXIT_CODE_ANNOTATION}" ) {code} ' in stage


def test_gpu_node_capacity() -> None:
    node = kwok.node("g", gpus=8)
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert node["metadata"]["annotations"] == {kwok.NODE_ANNOTATION: "fake"}


def test_keep_pod_ip_refuses_a_pod_ready_stage_it_does_not_know() -> None:
    stage = yaml.safe_dump({"kind": "Stage", "spec": {"next": {"statusTemplate": "phase: x"}}})
    with pytest.raises(ValueError, match="pod IPs"):
        kwok._keep_pod_ip(stage)

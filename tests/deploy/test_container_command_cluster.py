"""The image's command, exactly as the Dockerfile writes it (ENTRYPOINT + CMD, exec form, the
image's ENV), run locally against the local API server: it becomes ready and serves events.
The dead-letter sink's command from config/serving is run the same way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack.cluster.ports import free_port
from functions.runtime.sender import post_event
from tests.core.test_events import load_sample
from tests.deploy.support import (
    build,
    dockerfile_command,
    image_entrypoint,
    knative_service,
    local_command_env,
)

PYTHON_BIN = Path(sys.executable).parent
SAMPLES = ("01-captured-resource-add-clusterscoped-trainer.http.json",
           "02-captured-resource-update-pytorchjob-status.http.json",
           "03-captured-resource-delete-pytorchjob.http.json")


def wait_for(url: str, process: subprocess.Popen[bytes], timeout: float = 30.0) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        assert process.poll() is None, "the command exited"
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return time.monotonic() - started
        except (urllib.error.URLError, ConnectionError, TimeoutError):  # slow: not ready yet
            pass
        time.sleep(0.02)
    raise AssertionError(f"{url} never answered 200")


@pytest.fixture
def image_command_served(cluster: Any, crds: None, tmp_path: Path) -> Iterator[str]:
    stage, command = dockerfile_command()
    port = free_port()
    env = local_command_env(stage, PYTHON_BIN, os.environ)
    env.update(PORT=str(port), KUBECONFIG=str(cluster.kubeconfig))
    # Outside the repository: the installed package is what runs, as in the image.
    process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        wait_for(f"http://127.0.0.1:{port}/health/readiness", process)
        yield f"http://127.0.0.1:{port}/"
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_command_is_the_serve_all_command() -> None:
    _, command = dockerfile_command()
    assert command[:3] == ["python", "-m", "functions"]
    assert command[3:] == ["serve", "all"]


@pytest.mark.parametrize("sample", SAMPLES)
def test_image_command_serves_events(image_command_served: str, sample: str) -> None:
    answer = post_event(image_command_served, *load_sample(sample), 30)
    assert answer.status is not None and 200 <= answer.status < 300, answer.body[:300]


def test_dead_letter_sink_command_logs_to_stdout(bin_dir: Path, tmp_path: Path) -> None:
    stage, _ = dockerfile_command()
    ksvc = knative_service(build(bin_dir / "kustomize", "config/serving"),
                           "odh-training-dead-letters")
    [container] = ksvc["spec"]["template"]["spec"]["containers"]
    port = free_port()
    env = local_command_env(stage, PYTHON_BIN, os.environ)
    env.update({e["name"]: e["value"] for e in container.get("env") or []})
    env.update(PORT=str(port), HOME=str(tmp_path))
    process = subprocess.Popen([*image_entrypoint(stage), *container["args"]], cwd=tmp_path,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        wait_for(f"http://127.0.0.1:{port}/health/readiness", process)
        headers, body = load_sample(SAMPLES[1])
        answer = post_event(f"http://127.0.0.1:{port}/", headers, body, 10)
        assert answer.status == 202
    finally:
        process.terminate()
        out, _ = process.communicate(timeout=30)
    recorded = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    assert len(recorded) == 1
    assert recorded[0]["attributes"]["id"] == headers["Ce-Id"]
    assert recorded[0]["bytes"] == len(body)

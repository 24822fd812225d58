"""Logging as a container is configured: ``LOG_LEVEL`` and ``LOG_FORMAT`` (text or JSON lines),
for our loggers and for gunicorn's, in a served function."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from devstack.cluster.ports import free_port
from functions.runtime import logs
from tests.runtime.test_serve import wait_ready, write_kubeconfig
from tests.support import REPO


@pytest.mark.parametrize(("environ", "verbose", "level"), [
    pytest.param({}, False, "info", id="default"),
    pytest.param({"LOG_LEVEL": "WARNING"}, False, "warning", id="any-case"),
    pytest.param({"LOG_LEVEL": "error"}, True, "debug", id="verbose-wins"),
])
def test_the_level(environ: dict[str, str], verbose: bool, level: str) -> None:
    assert logs.level_name(environ, verbose=verbose) == level


@pytest.mark.parametrize(("environ", "match"), [
    pytest.param({"LOG_LEVEL": "loud"}, "LOG_LEVEL='loud'", id="unknown-level"),
    pytest.param({"LOG_FORMAT": "xml"}, "LOG_FORMAT='xml'", id="unknown-format"),
])
def test_an_unknown_setting_is_refused(environ: dict[str, str], match: str) -> None:
    with pytest.raises(logs.SettingError, match=match):
        logs.configure(environ=environ)


def test_a_json_line_carries_the_record_and_its_traceback() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("functions.x", logging.ERROR, __file__, 1, "failed %s",
                                   ("here",), sys.exc_info())
    doc = json.loads(logs.JsonFormatter().format(record))
    assert (doc["level"], doc["logger"], doc["message"]) == ("error", "functions.x",
                                                            "failed here")
    assert "ValueError: boom" in doc["exception"]
    assert doc["time"].endswith("+00:00")


def test_the_command_line_refuses_an_unknown_level() -> None:
    done = subprocess.run([sys.executable, "-m", "functions", "doctor", "--help"], cwd=REPO,
                          env={**os.environ, "LOG_LEVEL": "loud"}, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, "help needs no logging"
    done = subprocess.run([sys.executable, "-m", "functions", "doctor", "--kubeconfig",
                           "/nonexistent"], cwd=REPO, env={**os.environ, "LOG_LEVEL": "loud"},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "LOG_LEVEL='loud'" in done.stderr


def test_a_served_function_logs_json_lines_gunicorn_s_included(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "KUBECONFIG": str(write_kubeconfig(tmp_path / "kubeconfig")),
           "FUNCTIONS_CONTROLLER_MODULES": "tests.runtime.controllers", "LOG_FORMAT": "json"}
    log = tmp_path / "serve.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "functions", "serve", "reconcile", "--host", "127.0.0.1",
             "--port", str(port)], cwd=REPO, env=env, stdout=output, stderr=subprocess.STDOUT)
    try:
        assert wait_ready(f"http://127.0.0.1:{port}/health/readiness", process), \
            log.read_text()
    finally:
        process.terminate()
        process.wait(timeout=30)
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    docs = [json.loads(line) for line in lines]  # every line is one JSON object
    loggers = {doc["logger"] for doc in docs}
    assert "gunicorn.error" in loggers, loggers
    assert any(name.startswith("functions.") for name in loggers), loggers

"""config/monitoring checked by Prometheus's own tool: the PrometheusRule's groups pass
``promtool check rules`` and its alerts behave as ``tests/data/monitoring/rules_test.yaml``
says (``promtool test rules``); every expression of the Grafana dashboard parses (as a
recording rule, ``promtool check rules``) and names only our series. That every series the
rules and the dashboard name is in a real scrape after jobs ran is shown end to end
(tests/dev/e2e/test_lifecycle.py)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from devstack.cluster.binaries import ensure_bin_dir
from tests.deploy.support import REPO

MONITORING = REPO / "config" / "monitoring"
RULES_TEST = REPO / "tests" / "data" / "monitoring" / "rules_test.yaml"
# The series of this product (ours, and the upstream operators' names it keeps).
SERIES = re.compile(r"\b((?:odh_training|training_operator|mpi_operator)_[a-z_]+|"
                    r"(?:created|deleted|failed)_pods_total|"
                    r"(?:succeeded|failed)_service_creation_total|"
                    r"(?:created|deleted)_pod_groups_total)\b")
# Grafana's variables, as a query sends them.
VARIABLES = {"$__rate_interval": "5m", "$framework": ".*"}


def rule_groups() -> list[dict[str, Any]]:
    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def rule_expressions() -> list[str]:
    return [str(r["expr"]) for g in rule_groups() for r in g["rules"]]


def dashboard_expressions() -> list[str]:
    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    found = []
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = str(target["expr"])
            for variable, value in VARIABLES.items():
                expr = expr.replace(variable, value)
            found.append(expr)
    return found


def series_named(expressions: list[str]) -> set[str]:
    return {m.group(1) for e in expressions for m in SERIES.finditer(e)}


@pytest.fixture(scope="module")
def promtool_dir() -> Path:
    """Where ensure-testbin's optional ``promtool`` group is (built on first use)."""
    return ensure_bin_dir(("promtool",))


def promtool(bin_dir: Path, *args: str, cwd: Path) -> str:
    done = subprocess.run([str(bin_dir / "promtool"), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.binaries
def test_the_rules_pass_promtool_check(promtool_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule_groups()}))
    out = promtool(promtool_dir, "check", "rules", "rules.yaml", cwd=tmp_path)
    assert f"SUCCESS: {len(rule_expressions())} rules found" in out


@pytest.mark.binaries
def test_the_alerts_fire_as_their_tests_say(promtool_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule_groups()}))
    shutil.copy(RULES_TEST, tmp_path / RULES_TEST.name)
    tested = {t["alertname"] for case in yaml.safe_load(RULES_TEST.read_text())["tests"]
              for t in case["alert_rule_test"]}
    alerts = {r["alert"] for g in rule_groups() for r in g["rules"] if "alert" in r}
    assert tested == alerts
    assert "SUCCESS" in promtool(promtool_dir, "test", "rules", RULES_TEST.name, cwd=tmp_path)


@pytest.mark.binaries
def test_every_dashboard_expression_parses(promtool_dir: Path, tmp_path: Path) -> None:
    expressions = dashboard_expressions()
    rules = [{"record": f"dashboard:panel_{n}", "expr": e} for n, e in enumerate(expressions)]
    (tmp_path / "dashboard.yaml").write_text(yaml.safe_dump(
        {"groups": [{"name": "dashboard", "rules": rules}]}))
    out = promtool(promtool_dir, "check", "rules", "dashboard.yaml", cwd=tmp_path)
    assert f"SUCCESS: {len(expressions)} rules found" in out


@pytest.mark.binaries
def test_a_broken_expression_fails_the_check(promtool_dir: Path, tmp_path: Path) -> None:
    """The checks above can fail: promtool refuses what does not parse."""
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump({"groups": [{"name": "x", "rules": [
        {"record": "x:y", "expr": "sum by (le (rate(odh_training_jobs[5m]))"}]}]}))
    done = subprocess.run([str(promtool_dir / "promtool"), "check", "rules", "broken.yaml"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0


def test_the_rules_and_the_dashboard_name_the_service_levels() -> None:
    named = series_named(rule_expressions() + dashboard_expressions())
    assert {"odh_training_jobs", "odh_training_queue_depth",
            "odh_training_job_queued_seconds_bucket",
            "odh_training_job_to_running_seconds_bucket",
            "odh_training_job_run_seconds_bucket", "training_operator_jobs_failed_total",
            "mpi_operator_job_info", "odh_training_lifecycle_events_total"} <= named


def test_the_monitoring_page_documents_every_series_they_name() -> None:
    page = (REPO / "docs" / "monitoring.md").read_text()
    documented = set(re.findall(r"`([a-z_]+)`", page))
    # ``..._successful_total`` and the like stand for the names of their row's first series
    for row in re.findall(r"^\| `([a-z_]+)`, (.*?) \|", page, re.M):
        first = row[0]
        for short in re.findall(r"`\.\.\.(_[a-z_]+)`", row[1]):
            documented.add(first[:first.index("_jobs_") + len("_jobs")] + short)
    named = {re.sub(r"_(bucket|sum|count)$", "", s)
             for s in series_named(rule_expressions() + dashboard_expressions())}
    assert named - documented == set()

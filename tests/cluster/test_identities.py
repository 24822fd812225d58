"""Client identities of the local cluster (a certificate per user, signed by its CA) and its
optional audit log."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from functions.cluster.binaries import EXTRA_GROUPS, BinariesError, ensure_bin_dir
from functions.cluster.runner import ClusterError, LocalCluster
from functions.kube import resources
from functions.kube.client import ApiError, KubeClient
from functions.kube.config import from_kubeconfig


@pytest.mark.cluster
@pytest.mark.parametrize(("groups", "allowed"), [
    pytest.param(("system:masters",), True, id="administrator"),
    pytest.param((), False, id="no-rights"),
])
def test_user_kubeconfig_authenticates_as_that_user(cluster: LocalCluster,
                                                    groups: tuple[str, ...],
                                                    allowed: bool) -> None:
    user = f"tester-{len(groups)}"
    kube = KubeClient.from_config(from_kubeconfig(cluster.user_kubeconfig(user, groups)))
    if allowed:
        assert kube.get(resources.NAMESPACES, "default") is not None
    else:
        with pytest.raises(ApiError) as error:
            kube.get(resources.NAMESPACES, "default")
        assert error.value.status == 403
        assert f'"{user}"' in error.value.message


def test_user_kubeconfig_needs_a_started_cluster(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "bin", state_dir=tmp_path / "state")
    with pytest.raises(ClusterError, match="not started"):
        cluster.user_kubeconfig("someone")


@pytest.mark.parametrize(("audit", "flags"), [
    pytest.param(False, [], id="off-by-default"),
    pytest.param(True, ["--audit-log-format=json", "--audit-log-mode=blocking"], id="on"),
])
def test_audit_flags_and_policy(tmp_path: Path, audit: bool, flags: list[str]) -> None:
    cluster = LocalCluster(tmp_path / "bin", state_dir=tmp_path / "state", audit=audit)
    args = cluster._audit_args()
    for flag in flags:
        assert flag in args
    if audit:
        assert f"--audit-log-path={cluster.audit_log}" in args
        policy = yaml.safe_load((tmp_path / "state" / "audit-policy.yaml").read_text())
        assert policy["omitStages"] == ["RequestReceived"]
        assert policy["rules"] == [{"level": "Metadata"}]
    else:
        assert args == []


@pytest.mark.parametrize("group", [pytest.param(g, id=g) for g in EXTRA_GROUPS])
def test_extra_binaries_missing_from_testbin_dir_fail_clearly(
        group: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESTBIN_DIR", str(tmp_path))
    ensure_bin_dir.cache_clear()
    try:
        with pytest.raises(BinariesError, match=f"TESTBIN_EXTRA='{group}'"):
            ensure_bin_dir((group,))
    finally:
        ensure_bin_dir.cache_clear()

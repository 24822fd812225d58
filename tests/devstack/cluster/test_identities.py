"""Client identities of the local cluster (a certificate per user, signed by its CA), its
optional audit log, and the issuer of its ServiceAccount tokens."""

from __future__ import annotations

from pathlib import Path

import jwt
import pytest
import urllib3
import yaml

from devstack.cluster import pki
from devstack.cluster.binaries import EXTRA_GROUPS, BinariesError, ensure_bin_dir
from devstack.cluster.runner import ClusterError, LocalCluster
from devstack.tokens import service_account_token
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


@pytest.mark.cluster
def test_the_issuer_of_service_account_tokens_is_the_api_server_by_its_in_cluster_name(
        cluster: LocalCluster) -> None:
    """What Knative's OIDC verifiers need (eventing pkg/auth/verifier.go): the discovery
    document and keys at https://kubernetes.default.svc, under a certificate valid for that
    name, naming the issuer the tokens carry."""
    kube = cluster.client()
    account = "issuer-probe"
    kube.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": account, "namespace": "default"}}, "tests")
    token = service_account_token(kube, "default", account, audiences=["some-audience"])
    claims = jwt.decode(token, options={"verify_signature": False})
    assert (claims["iss"], claims["aud"]) == (pki.ISSUER, ["some-audience"])
    admin = cluster.root / "pki"
    pool = urllib3.HTTPSConnectionPool(
        "127.0.0.1", cluster.api_port, server_hostname="kubernetes.default.svc",
        ca_certs=str(admin / "ca.crt"), cert_file=str(admin / "admin.crt"),
        key_file=str(admin / "admin.key"), cert_reqs="CERT_REQUIRED")
    discovery = pool.request("GET", "/.well-known/openid-configuration").json()
    assert (discovery["issuer"], discovery["jwks_uri"]) == (pki.ISSUER, pki.JWKS_URI)
    keys = pool.request("GET", "/openid/v1/jwks").json()["keys"]
    header = jwt.get_unverified_header(token)
    [key] = [k for k in keys if k["kid"] == header["kid"]]
    verified = jwt.decode(token, jwt.PyJWK(key).key, algorithms=[header["alg"]],
                          audience="some-audience", issuer=pki.ISSUER)
    assert verified["sub"] == f"system:serviceaccount:default:{account}"
    wrong = urllib3.HTTPSConnectionPool(
        "127.0.0.1", cluster.api_port, server_hostname="kubernetes.example.com",
        ca_certs=str(admin / "ca.crt"), cert_reqs="CERT_REQUIRED", retries=False)
    with pytest.raises(urllib3.exceptions.SSLError):
        wrong.request("GET", "/readyz")

"""The per-identity kubeconfigs of the dev stack: replaced whole, private, nothing left over."""

from __future__ import annotations

import stat
from pathlib import Path

import yaml

from devstack.stack import token_kubeconfig

ADMIN = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
         "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
         "users": [{"name": "admin", "user": {"client-key-data": "a2V5"}}],
         "contexts": [{"name": "c", "context": {"cluster": "c", "user": "admin"}}]}


def test_written_again_whole_and_private(tmp_path: Path) -> None:
    admin = tmp_path / "admin.kubeconfig"
    admin.write_text(yaml.safe_dump(ADMIN))
    out = tmp_path / "events.kubeconfig"
    for token in ("first", "second"):
        assert token_kubeconfig(admin, token, out) == out
        config = yaml.safe_load(out.read_text())
        assert config["users"] == [{"name": "token", "user": {"token": token}}]
        assert config["contexts"][0]["context"]["user"] == "token"
        assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["admin.kubeconfig",
                                                          "events.kubeconfig"]

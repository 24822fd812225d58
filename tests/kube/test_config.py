"""Kubeconfig loading: inline client keys and certificates become private files (0600 in a
0700 directory), one per content, gone when the process that wrote them exits."""

from __future__ import annotations

import atexit
import base64
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from functions.kube import config
from tests.support import REPO

KEY = b"-----BEGIN EC PRIVATE KEY-----\nnot-a-real-key\n-----END EC PRIVATE KEY-----\n"
CERT = b"-----BEGIN CERTIFICATE-----\nnot-a-real-cert\n-----END CERTIFICATE-----\n"


def kubeconfig(directory: Path, user: dict[str, Any], cluster: dict[str, Any] | None = None
               ) -> Path:
    path = directory / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443",
                                               **(cluster or {})}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return path


def inline(tmp_path: Path) -> Path:
    return kubeconfig(tmp_path, {"client-key-data": base64.b64encode(KEY).decode(),
                                 "client-certificate-data": base64.b64encode(CERT).decode()},
                      {"certificate-authority-data": base64.b64encode(CERT).decode()})


def mode(path: str | Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_inline_key_is_a_private_file_with_its_content(tmp_path: Path) -> None:
    loaded = config.from_kubeconfig(inline(tmp_path))
    assert loaded.client_key_file is not None and loaded.client_cert_file is not None
    assert Path(loaded.client_key_file).read_bytes() == KEY
    assert Path(loaded.client_cert_file).read_bytes() == CERT
    assert loaded.ca_file is not None and Path(loaded.ca_file).read_bytes() == CERT
    assert mode(loaded.client_key_file) == 0o600
    assert mode(Path(loaded.client_key_file).parent) == 0o700
    assert Path(loaded.client_key_file).parent == config.PRIVATE_FILES.directory()


def test_loading_again_writes_no_new_files(tmp_path: Path) -> None:
    first = config.from_kubeconfig(inline(tmp_path))
    files = sorted(os.listdir(Path(str(first.client_key_file)).parent))
    for _ in range(5):
        again = config.from_kubeconfig(inline(tmp_path))
        assert again.client_key_file == first.client_key_file
    assert sorted(os.listdir(Path(str(first.client_key_file)).parent)) == files


@pytest.mark.parametrize(("user", "expected"), [
    pytest.param({"client-key": "keys/client.key", "client-certificate": "/abs/client.crt"},
                 ("keys/client.key", "/abs/client.crt"), id="paths-relative-to-the-file"),
    pytest.param({"token": "t"}, (None, None), id="token-only"),
])
def test_key_paths_are_used_as_given(tmp_path: Path, user: dict[str, str],
                                     expected: tuple[str | None, str | None]) -> None:
    loaded = config.from_kubeconfig(kubeconfig(tmp_path, user))
    key, cert = expected
    assert loaded.client_key_file == (str(tmp_path / key) if key else None)
    assert loaded.client_cert_file == cert


def test_data_that_is_not_base64_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(config.ConfigError, match="not base64"):
        config.from_kubeconfig(kubeconfig(tmp_path, {"client-key-data": "abc"}))


def test_files_are_removed_when_the_process_exits(tmp_path: Path) -> None:
    script = ("import json, sys\nfrom functions.kube import config\n"
              "c = config.from_kubeconfig(sys.argv[1])\n"
              "print(json.dumps([c.client_key_file, c.client_cert_file, c.ca_file]))\n"
              "assert open(c.client_key_file, 'rb').read().startswith(b'-----BEGIN')\n")
    done = subprocess.run([sys.executable, "-c", script, str(inline(tmp_path))], cwd=REPO,
                          capture_output=True, text=True, check=True)
    paths = json.loads(done.stdout)
    assert all(paths)
    assert not any(Path(p).exists() for p in paths)
    assert not Path(paths[0]).parent.exists()


def test_a_forked_child_leaves_its_parents_files_alone(tmp_path: Path) -> None:
    loaded = config.from_kubeconfig(inline(tmp_path))
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: load, run its exit hooks, report, leave without more cleanup
        code = 1
        try:
            own = config.from_kubeconfig(inline(tmp_path))
            atexit._run_exitfuncs()
            gone = not Path(str(own.client_key_file)).exists()
            os.write(write, json.dumps([own.client_key_file, gone]).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        own_key, own_gone = json.loads(pipe.read())
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert own_key != loaded.client_key_file
    assert own_gone, "the child removes what it wrote"
    assert Path(str(loaded.client_key_file)).read_bytes() == KEY

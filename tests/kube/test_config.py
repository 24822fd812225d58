"""Kubeconfig loading: inline client keys and certificates become private files, one per
content: anonymous memory files, which nothing leaves on disk however the process ends, or,
without them, files of a private directory (0600 in 0700) removed at exit."""

from __future__ import annotations

import atexit
import base64
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Callable
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


def test_inline_data_are_anonymous_memory_files_with_their_content(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # a fresh registry: an earlier test of this process may have made the private directory
    monkeypatch.setattr(config, "PRIVATE_FILES", config._PrivateFiles())
    loaded = config.from_kubeconfig(inline(tmp_path))
    files = (loaded.client_key_file, loaded.client_cert_file, loaded.ca_file)
    assert [Path(str(f)).read_bytes() for f in files] == [KEY, CERT, CERT]
    for path in (loaded.client_key_file, loaded.client_cert_file):
        assert os.readlink(str(path)).startswith("/memfd:kubecfg"), path
        assert mode(str(path)) == 0o600
    assert config.PRIVATE_FILES.directory() is None


def test_without_memory_files_inline_data_are_files_of_a_private_directory(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(config, "PRIVATE_FILES", config._PrivateFiles(anonymous=False))
    loaded = config.from_kubeconfig(inline(tmp_path))
    assert loaded.client_key_file is not None and loaded.client_cert_file is not None
    assert Path(loaded.client_key_file).read_bytes() == KEY
    assert Path(loaded.client_cert_file).read_bytes() == CERT
    assert loaded.ca_file is not None and Path(loaded.ca_file).read_bytes() == CERT
    assert mode(loaded.client_key_file) == 0o600
    assert mode(Path(loaded.client_key_file).parent) == 0o700
    assert Path(loaded.client_key_file).parent == config.PRIVATE_FILES.directory()
    shutil.rmtree(Path(loaded.client_key_file).parent)


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_loading_again_makes_no_new_files(tmp_path: Path) -> None:
    first = config.from_kubeconfig(inline(tmp_path))
    opened = open_descriptors()
    for _ in range(5):
        again = config.from_kubeconfig(inline(tmp_path))
        assert again.client_key_file == first.client_key_file
    assert open_descriptors() == opened


@pytest.mark.parametrize(("user", "expected"), [
    pytest.param({"client-key": "keys/client.key", "client-certificate": "{abs}/client.crt"},
                 ("keys/client.key", "client.crt"), id="paths-relative-to-the-file"),
    pytest.param({"token": "t"}, (None, None), id="token-only"),
])
def test_key_paths_are_used_as_given(tmp_path: Path, user: dict[str, str],
                                     expected: tuple[str | None, str | None]) -> None:
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "client.key").write_bytes(KEY)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "client.crt").write_bytes(CERT)
    user = {k: v.format(abs=elsewhere) for k, v in user.items()}
    loaded = config.from_kubeconfig(kubeconfig(tmp_path, user))
    key, cert = expected
    assert loaded.client_key_file == (str(tmp_path / key) if key else None)
    assert loaded.client_cert_file == (str(elsewhere / cert) if cert else None)


def test_a_key_file_that_does_not_exist_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(config.ConfigError, match="does not exist"):
        config.from_kubeconfig(kubeconfig(tmp_path, {"client-key": "/nowhere/client.key",
                                                     "client-certificate": "/nowhere/c.crt"}))


def test_data_that_is_not_base64_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(config.ConfigError, match="not base64"):
        config.from_kubeconfig(kubeconfig(tmp_path, {"client-key-data": "abc"}))


LOAD = ("import json, os, signal, sys\nfrom functions.kube import config\n"
        "{setup}c = config.from_kubeconfig(sys.argv[1])\n"
        "print(json.dumps([c.client_key_file, c.client_cert_file, c.ca_file]), flush=True)\n"
        "assert open(c.client_key_file, 'rb').read().startswith(b'-----BEGIN')\n"
        "{end}")


@pytest.mark.parametrize(("setup", "end"), [
    pytest.param("", "", id="memory-files-exit"),
    pytest.param("", "os.kill(os.getpid(), signal.SIGTERM)\n", id="memory-files-sigterm"),
    pytest.param("", "os.kill(os.getpid(), signal.SIGKILL)\n", id="memory-files-sigkill"),
    pytest.param("config.PRIVATE_FILES = config._PrivateFiles(anonymous=False)\n", "",
                 id="private-directory-exit"),
])
def test_nothing_is_left_on_disk_when_the_process_ends(tmp_path: Path, setup: str,
                                                       end: str) -> None:
    """However the process ends, for memory files (a stopped local-stack process is sent a
    SIGTERM, and a SIGKILL after a grace period); at a normal exit, for the directory."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    done = subprocess.run([sys.executable, "-c", LOAD.format(setup=setup, end=end),
                           str(inline(tmp_path))], cwd=REPO, capture_output=True, text=True,
                          check=False, env={**os.environ, "TMPDIR": str(temp)})
    assert done.returncode in (0, -signal.SIGTERM, -signal.SIGKILL), done.stderr
    paths = json.loads(done.stdout)
    assert all(paths)
    assert not any(Path(p).exists() for p in paths if not p.startswith("/proc/self/"))
    assert list(temp.iterdir()) == []


def in_forked_child(work: Callable[[], Any]) -> Any:
    """What ``work`` returns (JSON) when run in a forked child, which then leaves without
    any cleanup of its own (``os._exit``)."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        code = 1
        try:
            os.write(write, json.dumps(work()).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        found = json.loads(pipe.read())
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return found


def test_a_forked_child_leaves_its_parents_files_alone(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    monkeypatch.setattr(config, "PRIVATE_FILES", config._PrivateFiles(anonymous=False))
    loaded = config.from_kubeconfig(inline(tmp_path))

    def load_and_exit() -> list[Any]:  # the child's exit hooks run, then it reports
        own = config.from_kubeconfig(inline(tmp_path))
        atexit._run_exitfuncs()
        return [own.client_key_file, not Path(str(own.client_key_file)).exists()]

    own_key, own_gone = in_forked_child(load_and_exit)
    assert own_key != loaded.client_key_file
    assert own_gone, "the child removes what it wrote"
    assert Path(str(loaded.client_key_file)).read_bytes() == KEY
    shutil.rmtree(Path(str(loaded.client_key_file)).parent)


def test_a_forked_child_makes_its_own_memory_files(tmp_path: Path) -> None:
    loaded = config.from_kubeconfig(inline(tmp_path))

    def load() -> list[str]:
        own = config.from_kubeconfig(inline(tmp_path))
        return [str(own.client_key_file), Path(str(own.client_key_file)).read_bytes().decode()]

    own_key, content = in_forked_child(load)
    assert own_key != loaded.client_key_file and content.encode() == KEY
    assert Path(str(loaded.client_key_file)).read_bytes() == KEY

"""The project's network and credential boundaries are maintained libraries', never its own
code: no module of the product, the local stack, the benchmarks or the build scripts frames
HTTP/1.1 messages (the servers are gunicorn's and waitress's, the clients urllib3, h11 and the
standard ``http.client``), and kubeconfigs are loaded only through the ``kubernetes`` package's
loader (:mod:`functions.kube.config`). The tests themselves may write raw bytes: they play
hostile peers."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import REPO

OWN_CODE = ("functions", "tools", "bench", "hack")
MODULES = sorted(p for root in OWN_CODE for p in (REPO / root).rglob("*.py"))
# Servers written on the standard library's socket servers are servers of our own.
SERVER_PRIMITIVES = ("socketserver", "http.server", "wsgiref")
# Who may import the standard HTTP client, and why (its framing, not ours).
HTTP_CLIENT_USERS = {
    "functions/kube/pools.py": "the exception types of the client under urllib3",
    "tools/devstack/devstack/sandbox.py": "the local kubelet's probe over a pod's Unix socket",
    "bench/client.py": "the client-cost benchmark measures it beside urllib3",
    "bench/throughput.py": "the throughput benchmark's keep-alive sender",
}
# Who may name a kubeconfig's fields: the loader's caller, and what writes kubeconfigs.
KUBECONFIG_FIELDS = ("current-context", "certificate-authority-data", "client-key-data")
KUBECONFIG_WRITERS = {
    "functions/kube/config.py": "hands inline data to the loader as private files",
    "tools/devstack/devstack/cluster/runner.py": "writes the local cluster's kubeconfigs",
    "bench/runtime.py": "writes a throw-away kubeconfig for a served function",
}
REMOVED = ("functions/core/http1.py", "functions/kube/wire.py", "functions/runtime/httpd.py")


def relative(path: Path) -> str:
    return str(path.relative_to(REPO))


def constants(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Every string and bytes constant of a module that is not a docstring."""
    docstrings: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)):
            docstrings.add(id(body[0].value))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str | bytes)
                and id(node) not in docstrings):
            value = node.value
            yield node.lineno, value if isinstance(value, str) else value.decode("latin-1")


def imports(tree: ast.AST) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def under(name: str, packages: tuple[str, ...] | str) -> bool:
    wanted = (packages,) if isinstance(packages, str) else packages
    return any(name == p or name.startswith(p + ".") for p in wanted)


def test_there_are_modules_to_check() -> None:
    assert len(MODULES) > 150


@pytest.mark.parametrize("path", [pytest.param(p, id=relative(p)) for p in MODULES])
def test_no_module_frames_http_or_loads_a_kubeconfig_by_hand(path: Path) -> None:
    tree = ast.parse(path.read_text(), str(path))
    name = relative(path)
    found = [f"line {line}: a CRLF, HTTP/1.1's line end, in {text[:40]!r}"
             for line, text in constants(tree) if "\r\n" in text]
    found += [f"imports {module}" for module in imports(tree)
              if under(module, SERVER_PRIMITIVES)
              or (under(module, "http.client") and name not in HTTP_CLIENT_USERS)
              or (under(module, "kubernetes.config") and name != "functions/kube/config.py")]
    if name not in KUBECONFIG_WRITERS:
        found += [f"line {line}: names the kubeconfig field {text!r}"
                  for line, text in constants(tree) if text in KUBECONFIG_FIELDS]
    assert not found, f"{name}: " + "; ".join(found)


def test_the_allowances_are_still_needed() -> None:
    """Each module allowed an exception still makes use of it (an allowance outliving its use
    would let a later one in unseen)."""
    for name in HTTP_CLIENT_USERS:
        assert any(under(m, "http.client") for m in imports(ast.parse((REPO / name).read_text())))
    for name in KUBECONFIG_WRITERS:
        texts = {text for _, text in constants(ast.parse((REPO / name).read_text()))}
        assert texts & set(KUBECONFIG_FIELDS), name


def test_the_hand_written_http_modules_are_gone_and_unnamed() -> None:
    assert not [name for name in REMOVED if (REPO / name).exists()]
    docs = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")),
            *sorted((REPO / "eventing").rglob("*.md"))]
    named = [(relative(doc), name) for doc in docs if doc.exists()
             for name in REMOVED if Path(name).name in doc.read_text()]
    assert not named

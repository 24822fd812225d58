"""The layers hold: the pure core stays pure (no module in a ``core`` package imports an I/O
library or the adapters, so desired-state builders and status rules can be reasoned about, and
tested, as plain functions of their inputs), and the product never imports the local stack
(``devstack``, a distribution of its own that is not in the product's image)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "functions"
FORBIDDEN = (
    "kubernetes", "flask", "werkzeug", "gunicorn", "urllib3", "requests", "http.client",
    "http.server", "urllib.request", "socket",
    "subprocess", "threading", "functions.kube", "functions.runtime", "devstack",
)
CORE_MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "core" in p.relative_to(PACKAGE).parts)
PRODUCT_MODULES = sorted(PACKAGE.rglob("*.py"))


def imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_there_is_a_core_to_check() -> None:
    assert len(CORE_MODULES) > 10


@pytest.mark.parametrize("path", [pytest.param(p, id=str(p.relative_to(PACKAGE)))
                                  for p in CORE_MODULES])
def test_core_module_imports_no_io(path: Path) -> None:
    bad = sorted(name for name in imported_modules(path)
                 if any(name == f or name.startswith(f + ".") for f in FORBIDDEN))
    assert not bad, f"{path.relative_to(PACKAGE)} imports {bad}"


@pytest.mark.parametrize("path", [pytest.param(p, id=str(p.relative_to(PACKAGE)))
                                  for p in PRODUCT_MODULES])
def test_the_product_never_imports_the_local_stack(path: Path) -> None:
    bad = sorted(name for name in imported_modules(path)
                 if name == "devstack" or name.startswith("devstack."))
    assert not bad, f"{path.relative_to(PACKAGE)} imports {bad}"

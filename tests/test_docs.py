"""The README is the door and docs/ the house: the README's first screen says what this is, how
to install it on OpenShift AI and how to run it locally; it links every page of docs/; every
relative link of the README and the docs reaches a file and, where it names one, a heading; and
what the pages state about the code (requirements, command lines, the SDK example, the tables
of reasons, exit codes, flags and samples) is what the code and manifests have."""

from __future__ import annotations

import argparse
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubeflow.training  # type: ignore[import-untyped]
import pytest
import yaml

from functions.api import cli
from functions.api.exits import EPILOG, ExitCode
from functions.core.delivery_auth import STATUS, Reason
from functions.doctor.core.knative import MIN_EVENTING, MIN_SERVING
from tests.support import REPO

README = REPO / "README.md"
DOCS = REPO / "docs"
PAGES = sorted(DOCS.glob("*.md"))
FIRST_SCREEN = 80  # lines: what it is, the OpenShift AI install and the local run fit in them
README_LINES = 220  # the README stays a door; the rest is docs/


# -- reading Markdown: headings, links, fenced blocks -----------------------------------------

FENCE = re.compile(r"^\s*```")
LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`[^`]*`")


@dataclass(frozen=True)
class Block:
    """A fenced block: its info string, its text and the line it opens on (1-based)."""

    info: str
    text: str
    line: int


def prose(text: str) -> list[tuple[int, str]]:
    """The lines outside fenced blocks, numbered from 1, with their code spans blanked (a
    bracket in code is no link)."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, CODE_SPAN.sub("``", line)))
    return lines


def blocks(text: str) -> list[Block]:
    found, opened, info, body = [], 0, "", list[str]()
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            if opened:
                found.append(Block(info, "\n".join(body), opened))
                opened, body = 0, []
            else:
                opened, info = number, line.strip()[3:].strip()
        elif opened:
            body.append(line)
    return found


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text as rendered (no code or emphasis marks),
    lower case, without punctuation, spaces as hyphens."""
    text = heading.replace("`", "").replace("*", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a page's headings (GitHub numbers a repeated one: -1, -2, ...)."""
    seen: dict[str, int] = {}
    found, fenced = set(), False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#{1,6} (.+)", line)):
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """The relative link targets of a page, with the line each is on."""
    numbered = prose(path.read_text())
    text = "\n".join(line for _, line in numbered)
    found = []
    for match in LINK.finditer(text):
        target = match.group(2)
        if re.match(r"[a-z][a-z0-9+.-]*:", target):   # http:, https:, mailto:
            continue
        line = numbered[text.count("\n", 0, match.start())][0]
        found.append((line, target))
    return found


def table(text: str, heading: str) -> list[list[str]]:
    """The rows of the first table under ``heading``, as cells (the header row left out)."""
    lines = text.split(f"\n{heading}\n", 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    cells = [[cell.strip() for cell in re.split(r"(?<!\\)\|", row)[1:-1]]
             for row in lines[start:end]]
    return cells[2:]   # the header row and the rule under it left out


def between(text: str, start: str, end: str) -> str:
    return text.split(start, 1)[1].split(end, 1)[0]


def flat(text: str) -> str:
    return " ".join(text.split())


def found(pattern: str, text: str) -> re.Match[str]:
    match = re.search(pattern, text, re.M)
    assert match is not None, pattern
    return match


# -- the README's first screen -----------------------------------------------------------------

def first_screen() -> str:
    return "\n".join(README.read_text().splitlines()[:FIRST_SCREEN])


@pytest.mark.parametrize("wanted", [
    pytest.param("# ODH training functions\n", id="title"),
    pytest.param("Kubeflow training for Open Data Hub and Red Hat OpenShift AI, as an "
                 "event-driven controller on\nKnative", id="what-it-is"),
    pytest.param("\n## Requirements\n", id="requirements"),
    pytest.param("\n## Install on OpenShift AI\n", id="install-heading"),
    pytest.param("\npython -m functions doctor -n redhat-ods-applications", id="doctor"),
    pytest.param("\noc apply -k config/overlays/rhoai ", id="install-command"),
    pytest.param("\n## Run locally\n", id="run-heading"),
    pytest.param("```sh\nmake dev\n```", id="make-dev"),
])
def test_the_first_screen_says_what_it_is_how_to_install_and_how_to_run(wanted: str) -> None:
    assert wanted in first_screen(), f"not in the README's first {FIRST_SCREEN} lines: {wanted!r}"


def test_the_first_screen_draws_the_event_path() -> None:
    """The diagram: the sources, the Broker and its resync, the Triggers and their tokens, the
    three functions, the dead letters, back to the API server."""
    [diagram] = [b for b in blocks(first_screen()) if b.info == ""]
    for part in ("API server", "ApiServerSources", "Broker", "PingSource", "resync", "Triggers",
                 "OIDC", "authentication-oidc", "reconcile", "gc", "status", "dead letters",
                 "Server-Side Apply"):
        assert part in diagram.text, part


def test_the_install_comes_before_the_local_run_and_both_before_the_details() -> None:
    headings = [line for _, line in prose(README.read_text()) if line.startswith("## ")]
    assert headings[:3] == ["## Requirements", "## Install on OpenShift AI", "## Run locally"]


def test_the_readme_stays_a_door() -> None:
    assert len(README.read_text().splitlines()) <= README_LINES


def test_the_readme_links_every_page_of_the_docs() -> None:
    linked = {(README.parent / target.split("#")[0]).resolve() for _, target in links(README)}
    assert PAGES, "no docs/*.md"
    assert [p.name for p in PAGES if p.resolve() not in linked] == []


# -- links -------------------------------------------------------------------------------------

def linked_pages() -> list[Path]:
    return [README, *PAGES, REPO / "eventing" / "README.md"]


@pytest.mark.parametrize("page", [pytest.param(p, id=str(p.relative_to(REPO)))
                                  for p in linked_pages()])
def test_every_relative_link_reaches_a_file_and_heading(page: Path) -> None:
    broken = []
    for line, target in links(page):
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists() or REPO.resolve() not in (resolved, *resolved.parents):
            broken.append(f"line {line}: {target}: no such file in the repository")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"line {line}: {target}: no heading #{anchor} in {resolved.name}")
    assert broken == []


@pytest.mark.parametrize(("heading", "anchor"), [
    pytest.param("MPIJob: `v2beta1` and `v1`", "mpijob-v2beta1-and-v1", id="code"),
    pytest.param("Sharing the cluster with the platform's own operators",
                 "sharing-the-cluster-with-the-platforms-own-operators", id="apostrophe"),
    pytest.param("On OpenShift AI or Open Data Hub (OpenShift Serverless)",
                 "on-openshift-ai-or-open-data-hub-openshift-serverless", id="parentheses"),
    pytest.param("A burst, side by side with the Go operator",
                 "a-burst-side-by-side-with-the-go-operator", id="comma"),
    pytest.param("`make dev`", "make-dev", id="code-only"),
    pytest.param("odh_training metrics", "odh_training-metrics", id="underscore"),
])
def test_anchors_are_githubs(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n## A part\n\n[ok](#a-part) [gone](#nowhere) `[code](#x)`\n"
                    "```\n[fenced](#y)\n```\n[web](https://example.com)\n")
    assert links(page) == [(5, "#a-part"), (5, "#nowhere")]
    assert anchors(page) == {"page", "a-part"}


# -- what the pages state, held to the code --------------------------------------------------

def test_the_requirements_are_the_projects() -> None:
    text = flat(README.read_text())
    python = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    assert python.startswith(">=")
    assert f"Python ≥ {python[2:]}" in text
    # the newest go directive of the modules hack/ensure-testbin.sh builds (GOTOOLCHAIN=local)
    go = max((int(m[1]), int(m[2])) for m in (found(r"^go (\d+)\.(\d+)", p.read_text())
                                              for p in (REPO / "hack").rglob("go.mod")))
    for page in (text, flat((DOCS / "dev-stack.md").read_text())):
        assert f"Go ≥ {go[0]}.{go[1]}" in page
    assert MIN_SERVING == MIN_EVENTING
    assert f"Knative Serving and Eventing {MIN_SERVING[0]}.{MIN_SERVING[1]} or newer" in text


def test_the_rhoai_trainer_command_puts_the_trainer_in_the_overlays_namespace() -> None:
    """The README's (and install.md's) sed over the sample Trainer gives a Trainer whose
    appNamespace is the namespace config/overlays/rhoai installs into."""
    overlay = yaml.safe_load((REPO / "config/overlays/rhoai/kustomization.yaml").read_text())
    sample = (REPO / "config/samples/trainer.yaml").read_text()
    for page in (README, DOCS / "install.md"):
        old, new = found(r"sed 's/([^/]+)/([^/]+)/'", page.read_text()).groups()
        assert sample.count(old) == 1, page
        trainer = yaml.safe_load(sample.replace(old, new))
        assert trainer["spec"]["appNamespace"] == overlay["namespace"] == "redhat-ods-applications"
        assert "oc apply -k config/overlays/rhoai" in page.read_text()


def test_the_sdk_example_creates_a_pytorchjob_and_waits_for_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """README, Submit and watch a job: the Kubeflow SDK example runs as written, with a client
    that records instead of calling a cluster (tests/jobs/test_sdk_cluster.py runs the SDK
    against the controllers)."""
    created: list[tuple[dict[str, Any], str]] = []
    waited: list[tuple[Any, ...]] = []

    class Client:
        def create_job(self, job: Any, namespace: str) -> None:
            created.append((kubeflow.training.ApiClient().sanitize_for_serialization(job),
                            namespace))

        def wait_for_job_conditions(self, *args: Any, **kwargs: Any) -> None:
            waited.append((*args, kwargs))

    [example] = [b for b in blocks(README.read_text()) if b.info == "python"]
    monkeypatch.setattr(kubeflow.training, "TrainingClient", Client)
    exec(compile(example.text, f"README.md, line {example.line + 1}", "exec"), {})
    [(job, namespace)] = created
    assert (job["apiVersion"], job["kind"], namespace) == ("kubeflow.org/v1", "PyTorchJob",
                                                          "team-a")
    assert set(job["spec"]["pytorchReplicaSpecs"]) == {"Master", "Worker"}
    assert waited == [(job["metadata"]["name"], namespace, {"job_kind": "PyTorchJob"})]


def test_the_refused_deliveries_table_is_the_functions() -> None:
    rows = table((DOCS / "troubleshooting.md").read_text(), "## Refused deliveries")
    stated = {row[0].strip("`"): int(row[1]) for row in rows}
    assert stated == {reason.value: STATUS[reason] for reason in Reason}


def test_the_exit_codes_table_is_the_command_lines() -> None:
    """docs/training-api.md's table is the one every command line prints (exits.EPILOG), and
    docs/troubleshooting.md names each code by the same meaning."""
    printed = {int(code): flat(meaning) for code, meaning in
               re.findall(r"^  (\d)  (.*?)(?=^  \d  |\Z)", EPILOG, re.M | re.S)}
    assert set(printed) == {code.value for code in ExitCode}
    rows = table((DOCS / "training-api.md").read_text(), "### Exit codes")
    assert {int(code): meaning.replace("`", "") for code, meaning in rows} == printed
    troubleshooting = flat((DOCS / "troubleshooting.md").read_text())
    for code, meaning in printed.items():
        assert f"{code} {' '.join(meaning.split()[:2]).rstrip(':')}" in troubleshooting, code


def actions() -> dict[str, argparse.ArgumentParser]:
    parser = argparse.ArgumentParser()
    cli.build(parser)
    [subparsers] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(subparsers.choices)


CONNECTION = "cluster and credentials (as kubectl)"


def test_the_flags_are_the_command_lines() -> None:
    """docs/training-api.md, Flags: every action's own flags (each by one of its spellings at
    least, none that is not one), and the cluster and credential flags every action takes."""
    text = (DOCS / "training-api.md").read_text()
    rows = {row[0].strip("`").split()[0]: set(re.findall(r"`(--?[A-Za-z][\w-]*)", row[1]))
            for row in table(text, "### Flags")}
    common = set(re.findall(r"`(--?[A-Za-z][\w-]*)", between(text, "### Flags", "| action |")))
    assert set(rows) == set(actions())
    for name, parser in actions().items():
        groups = {a: g.title for g in parser._action_groups for a in g._group_actions}
        options = [a for a in parser._actions if a.option_strings and a.dest != "help"]
        own = [a for a in options if groups[a] != CONNECTION]
        shared = [a for a in options if groups[a] == CONNECTION]
        spellings = {s for a in own for s in a.option_strings}
        assert [a.option_strings for a in own if not rows[name] & set(a.option_strings)] == [], name
        assert rows[name] - spellings == set(), name
        assert [a.option_strings for a in shared if not common & set(a.option_strings)] == []
        assert common - {s for a in shared for s in a.option_strings} - {"--help"} == set()


def test_the_samples_table_lists_every_sample() -> None:
    rows = table((DOCS / "training-jobs.md").read_text(), "## Samples")
    listed = [row[0].strip("`") for row in rows]
    samples = sorted(p.name for p in (REPO / "config" / "samples").glob("*.yaml")
                     if p.name != "kustomization.yaml")
    assert sorted(listed) == samples

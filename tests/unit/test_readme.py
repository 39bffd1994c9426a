"""README.md stays true: under 150 lines, every `make X` it names is a Makefile target, every repository path it
names exists, every link resolves, its manifest is the example's and its `kubectl get qwi` header is the CRD's.

The oracles are the repository itself (the Makefile's targets, the files on disk, examples/, crds/), never the
README's own text."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_LINES = 150
# What the targets write; not in a clone, so a path under them is an output, not a reference.
OUTPUT_DIRS = {"build", "dist", ".venv", ".dev"}
EXAMPLE = "examples/qwen3-4b-instruct-a10g.yaml"
CRD = ROOT / "crds" / "qwenfleet.io_qweninferences.yaml"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def make_targets(makefile: str) -> set[str]:
    return set(re.findall(r"^([A-Za-z0-9][\w.-]*)\s*:(?!=)", makefile, re.MULTILINE))


def top_level(root: Path) -> set[str]:
    return {p.name for p in root.iterdir() if not p.name.startswith(".") and p.name not in OUTPUT_DIRS}


def repo_paths(text: str, tops: set[str]) -> set[str]:
    """Words that start with a top-level entry of the repository and a slash (``examples/x.yaml``, ``docs/``),
    or name a top-level file (``Makefile``, ``pyproject.toml``)."""
    dirs = "|".join(sorted(re.escape(t) for t in tops))
    found = set(re.findall(rf"(?<![\w.~/$-])((?:{dirs})/[\w./@+-]*)", text))
    return {p.rstrip(".") for p in found}


def readme_problems(text: str, exists: Callable[[str], bool], targets: set[str], tops: set[str]) -> list[str]:
    problems = []
    lines = text.count("\n")
    if lines >= MAX_LINES:
        problems.append(f"README.md has {lines} lines (at most {MAX_LINES - 1})")
    problems += [f"`make {t}` is no Makefile target" for t in sorted(set(re.findall(r"\bmake ([a-z][\w-]*)", text)))
                 if t not in targets]
    problems += [f"{p} does not exist" for p in sorted(repo_paths(text, tops)) if not exists(p)]
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path = target.partition("#")[0]
        if not exists(path):
            problems.append(f"link {target} does not resolve")
        elif path.startswith("docs/") and not path.endswith(".md"):
            problems.append(f"link {target} is not a docs page")
    return problems


def _exists(path: str) -> bool:
    return (ROOT / path).exists()


def _readme() -> str:
    return README.read_text()


def _facts() -> tuple[set[str], set[str]]:
    return make_targets((ROOT / "Makefile").read_text()), top_level(ROOT)


def test_the_readme_is_true_to_the_repository() -> None:
    targets, tops = _facts()
    assert readme_problems(_readme(), _exists, targets, tops) == []


def test_the_checks_see_what_the_readme_references() -> None:
    """The extraction is not vacuous: the commands, the example, the chart and the docs links are found."""
    text = _readme()
    assert {"run", "test", "image", "docs", "help"} <= set(re.findall(r"\bmake ([a-z][\w-]*)", text))
    assert {EXAMPLE, "charts/qwen-fleet", "docs/getting-started/cluster.md"} <= repo_paths(text, top_level(ROOT))
    assert len([t for t in LINK.findall(text) if t.startswith("docs/")]) >= 10


def test_a_renamed_file_or_a_dropped_target_is_caught() -> None:
    targets, tops = _facts()
    text = _readme()
    renamed = readme_problems(text, lambda p: _exists(p) and p != EXAMPLE, targets, tops)
    assert renamed == [f"{EXAMPLE} does not exist"]
    moved_page = readme_problems(text, lambda p: _exists(p) and p != "docs/concepts/planner.md", targets, tops)
    assert moved_page == ["docs/concepts/planner.md does not exist", "link docs/concepts/planner.md does not resolve"]
    assert readme_problems(text, _exists, targets - {"image"}, tops) == ["`make image` is no Makefile target"]
    assert readme_problems(text + "x\n" * MAX_LINES, _exists, targets, tops)[0].startswith("README.md has")


def test_the_two_commands_are_there_as_they_are() -> None:
    block = re.search(r"```sh\n(make run .*?)```", _readme(), re.DOTALL)
    assert block is not None
    assert [line.split("#")[0].strip() for line in block.group(1).splitlines()] == ["make run", "make test"]


def test_the_manifest_is_the_example() -> None:
    block = re.search(r"```yaml\n(.*?)```", _readme(), re.DOTALL)
    assert block is not None
    assert yaml.safe_load(block.group(1)) == yaml.safe_load((ROOT / EXAMPLE).read_text())
    assert f"kubectl apply -f {EXAMPLE}" in _readme()


def test_kubectl_get_qwi_shows_the_crds_columns() -> None:
    version = yaml.safe_load(CRD.read_text())["spec"]["versions"][0]
    columns = [c["name"].upper() for c in version["additionalPrinterColumns"] if not c.get("priority")]
    lines = _readme().splitlines()
    header = lines[lines.index("$ kubectl get qwi") + 1].split()
    assert header == ["NAME", *columns]


def test_the_comparison_table_has_a_cell_per_system() -> None:
    rows = [line for line in _readme().splitlines() if line.startswith("| ")]
    assert len(rows) >= 10
    widths = {line.count(" | ") for line in rows}
    assert widths == {6}, widths

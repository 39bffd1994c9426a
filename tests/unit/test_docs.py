"""The docs site: `mkdocs build --strict` passes (what `make docs` runs), and fails on a broken link, a broken
anchor, a link to a repository file that does not exist, a nav entry without a page and a page outside the nav.
The API reference (hack/api-reference.py, a hook of the build) lists every field of each CRD with its type,
default, validation and CEL messages, read here from crds/ independently of the generator.

Offline: the Material theme and the pages are local; nothing is fetched."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / "hack" / "api-reference.py"
CRDS = sorted((ROOT / "crds").glob("*.yaml"))


@functools.cache
def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("api_reference", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                           "--site-dir", str(site)], cwd=ROOT, capture_output=True, text=True, env=env,
                          timeout=300, check=False)


def test_the_site_builds_strict(tmp_path: Path) -> None:
    result = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert result.returncode == 0, result.stderr[-4000:]
    assert "WARNING" not in result.stderr, result.stderr[-4000:]
    reference = (tmp_path / "site" / "reference" / "qwen-inference" / "index.html").read_text()
    assert "maxNumSeqs" in reference and "Most sequences in one batch" in reference
    assert (tmp_path / "site" / "benchmarks" / "routing" / "index.html").is_file()
    assert (tmp_path / "site" / "benchmarks" / "routing.png").is_file()


def test_a_broken_link_an_anchor_and_a_page_outside_the_nav_fail(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    (docs / "orphan.md").write_text("# Not in the nav\n")
    with (docs / "index.md").open("a") as f:
        f.write("\n[a](no-such-page.md) [b](helm.md#no-such-section) [c](../tests/no-such-file.py)\n")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    config |= {"docs_dir": str(docs), "hooks": [str(HOOK)]}
    config["nav"].append({"Gone": "no-such-nav-page.md"})
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    result = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert result.returncode != 0
    for words in ("'no-such-page.md'", "#no-such-section", "'../tests/no-such-file.py'", "orphan.md",
                  "no-such-nav-page.md"):
        assert words in result.stderr, (words, result.stderr[-4000:])


# --- the API reference ----------------------------------------------------------------------------------


def _objects(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, schema) of every object with properties, as the reference names them: items add [], maps {}."""
    inner, suffix = schema, ""
    while inner.get("type") == "array" and isinstance(inner.get("items"), dict):
        inner, suffix = inner["items"], suffix + "[]"
    if isinstance(inner.get("additionalProperties"), dict) and "properties" not in inner:
        inner, suffix = inner["additionalProperties"], suffix + "{}"
    if inner.get("properties") and path:
        yield path + suffix, inner
    for name, child in inner.get("properties", {}).items():
        yield from _objects(child, f"{path}{suffix}.{name}" if path else name)


def _sections(page: str) -> dict[str, str]:
    out, current = {}, None
    for line in page.splitlines():
        heading = re.match(r"^#{2,3} `([^`]+)` \{ #[\w-]+ \}$", line)
        if heading:
            current = heading.group(1)
            out[current] = ""
        elif current is not None:
            out[current] += line + "\n"
    return out


def _plain(markdown: str) -> str:
    for escaped, char in (("\\[", "["), ("\\]", "]"), ("\\*", "*"), ("&lt;", "<"), ("\\\\", "\\")):
        markdown = markdown.replace(escaped, char)
    return " ".join(markdown.split())


@pytest.mark.parametrize("crd_file", CRDS, ids=lambda p: p.name)
def test_the_reference_lists_every_field_with_its_facts(crd_file: Path) -> None:
    crd = yaml.safe_load(crd_file.read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    page = _generator().reference_pages(ROOT)[re.sub(r"(?<!^)(?=[A-Z])", "-", crd["spec"]["names"]["kind"]).lower()
                                             + ".md"]
    sections, plain = _sections(page), _plain(page)
    objects = list(_objects(schema))
    assert len(objects) > 10
    for path, node in objects:
        assert path in sections, path
        for name, child in node["properties"].items():
            entry = re.search(rf"^- \*\*`{re.escape(name)}`\*\* · (.*)$", sections[path], re.MULTILINE)
            assert entry is not None, (path, name)
            if "default" in child:
                assert f"default `{json.dumps(child['default'], sort_keys=True)}`" in entry.group(1), (path, name)
            for key in ("minimum", "maximum", "maxLength"):
                if key in child:
                    assert f"{key.replace('Length', ' length')} {child[key]}" in entry.group(1), (path, name, key)
            for value in child.get("enum", []):
                assert f"`{json.dumps(value)}`" in entry.group(1), (path, name, value)
    messages = [r["message"] for r in _all_rules(schema)]
    assert messages
    for message in messages:
        assert " ".join(message.split()) in plain, message


def _all_rules(schema: Any) -> Iterator[dict[str, Any]]:
    if isinstance(schema, dict):
        yield from (r for r in schema.get("x-kubernetes-validations", []) if "message" in r)
        for value in schema.values():
            yield from _all_rules(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _all_rules(value)


def test_a_spot_check_of_one_field(tmp_path: Path) -> None:
    """engine.maxNumSeqs as the CRD has it, through the script's own command line (one page per CRD)."""
    assert _generator().main([str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["qwen-batch.md", "qwen-inference.md"]
    crd = yaml.safe_load((ROOT / "crds" / "qwenfleet.io_qweninferences.yaml").read_text())
    field = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["engine"][
        "properties"]["maxNumSeqs"]
    section = _sections((tmp_path / "qwen-inference.md").read_text())["spec.engine"]
    entry = section[section.index("- **`maxNumSeqs`**"):].split("\n- ", 1)[0]
    assert entry.startswith(f"- **`maxNumSeqs`** · {field['type']}")
    assert f"minimum {field['minimum']}" in entry and f"maximum {field['maximum']}" in entry
    assert " ".join(field["description"].split())[:60] in _plain(entry)


def test_every_make_target_a_page_names_exists() -> None:
    """`make X` in a code span of any page the site carries names a target of the Makefile."""
    targets = set(re.findall(r"^([A-Za-z0-9][\w.-]*)\s*:(?!=)", (ROOT / "Makefile").read_text(), re.MULTILINE))
    pages = [*sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "bench" / "results").glob("*.md")),
             ROOT / "charts" / "qwen-fleet" / "README.md"]
    named = {(p.relative_to(ROOT).as_posix(), target) for p in pages
             for target in re.findall(r"`make ([a-z][\w-]*)", p.read_text())}
    assert len(named) > 20
    assert [(page, t) for page, t in sorted(named) if t not in targets] == []

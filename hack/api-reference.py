#!/usr/bin/env python3
"""The API reference, generated from the CRDs in crds/ (never written by hand), and the docs site's other pages
that live outside docs/.

Two ways in, one code path:

- ``hack/api-reference.py OUT_DIR`` writes one markdown page per kind (``qwen-inference.md``, ``qwen-batch.md``)
  with every field of its schema: path, type, description, default and validation (enum, bounds, lengths,
  pattern, required, CEL rules with their messages);
- as an MkDocs hook (mkdocs.yml ``hooks:``), ``mkdocs build`` (make docs) adds the same pages to the site as
  ``reference/<kind>.md``, publishes ``bench/results/*.md`` (and the plots they show) as ``benchmarks/`` and the
  chart's README as ``reference/chart.md``, and rewrites the links of every page that leave docs/: to a page the
  site publishes they point at it, to another file of the repository they become its path in code (the site does
  not carry it), to a file that does not exist they are a warning (``--strict`` fails).

The pages are made at build time and not committed: the CRDs change with every API change, and a committed copy
would drift. The nav (mkdocs.yml) names them; a page the hook makes and the nav does not name fails the build.
"""

from __future__ import annotations

import json
import logging
import posixpath
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CRD_DIR = "crds"
# Files outside docs/ that the site publishes: repository path -> path in the site.
BENCH_DIR = "bench/results"
BENCH_SITE_DIR = "benchmarks"
BENCH_SUFFIXES = (".md", ".png")
EXTRA_PAGES = {"charts/qwen-fleet/README.md": "reference/chart.md"}
REFERENCE_DIR = "reference"
# A CEL rule longer than this is shown cut (the extraArgs rules hold vLLM's whole flag table); the CRD has it all.
RULE_CHARS = 400
LINK = re.compile(r'(!?)\[([^\]\n]*)\]\(([^)\s]+)((?:\s+"[^"\n]*")?)\)')
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
log = logging.getLogger("mkdocs.hooks.qwen_fleet")


# --- the schema as a list of fields (pure) --------------------------------------------------------------


@dataclass
class Field:
    path: str
    type: str
    description: str = ""
    default: Any = None
    has_default: bool = False
    required: bool = False
    validation: list[str] = field(default_factory=list)
    rules: list[tuple[str, str]] = field(default_factory=list)  # (CEL rule, its message)
    members: str = ""  # the path its children hang under: spec.engine.env[] for an array of objects
    children: list[Field] = field(default_factory=list)


def type_name(schema: dict[str, Any]) -> str:
    if schema.get("x-kubernetes-int-or-string"):
        return "integer or string"
    if "anyOf" in schema:
        return " or ".join(sorted({str(s.get("type", "any")) for s in schema["anyOf"]}))
    kind = str(schema.get("type", "any"))
    if kind == "array":
        return f"array of {type_name(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"map of {type_name(schema['additionalProperties'])}"
    fmt = schema.get("format")
    return f"{kind} ({fmt})" if fmt else kind


def validation_of(schema: dict[str, Any]) -> list[str]:
    """The schema's constraints in words, in a fixed order."""
    out = []
    if "enum" in schema:
        out.append("one of " + ", ".join(code(json.dumps(v)) for v in schema["enum"]))
    for key, words in (("minimum", "minimum"), ("maximum", "maximum"), ("minLength", "min length"),
                       ("maxLength", "max length"), ("minItems", "min items"), ("maxItems", "max items"),
                       ("minProperties", "min keys"), ("maxProperties", "max keys")):
        if key in schema:
            exclusive = key in ("minimum", "maximum") and schema.get(f"exclusive{key.capitalize()}")
            out.append(f"{words} {schema[key]}" + (" (exclusive)" if exclusive else ""))
    if "pattern" in schema:
        out.append(f"pattern {code(schema['pattern'])}")
    if schema.get("x-kubernetes-list-type"):
        keys = schema.get("x-kubernetes-list-map-keys")
        out.append(f"list type {schema['x-kubernetes-list-type']}" + (f", keys {', '.join(keys)}" if keys else ""))
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        out.append("any fields kept")
    return out


def rules_of(schema: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for rule in schema.get("x-kubernetes-validations", []):
        message = rule.get("message") or ""
        if rule.get("messageExpression"):
            worded = "(the apiserver words its message from the value: messageExpression)"
            message = f"{message} {worded}" if message else worded
        out.append((str(rule["rule"]), message))
    return out


def walk(schema: dict[str, Any], path: str, required: bool = False) -> Field:
    """The field at ``path`` and, depth first, every field under it (object properties, array items, map values)."""
    node = Field(path=path, type=type_name(schema), description=str(schema.get("description", "")).strip(),
                 default=schema.get("default"), has_default="default" in schema, required=required,
                 validation=validation_of(schema), rules=rules_of(schema))
    inner, suffix = schema, ""
    while inner.get("type") == "array" and isinstance(inner.get("items"), dict):
        inner, suffix = inner["items"], suffix + "[]"
        node.validation += [f"items: {v}" for v in validation_of(inner)] if "properties" not in inner else []
        node.rules += rules_of(inner) if "properties" not in inner else []
    if isinstance(inner.get("additionalProperties"), dict) and "properties" not in inner:
        inner, suffix = inner["additionalProperties"], suffix + "{}"
    node.members, needed = path + suffix, set(inner.get("required", []))
    for name, child in inner.get("properties", {}).items():
        node.children.append(walk(child, f"{path}{suffix}.{name}" if path else name, name in needed))
    if inner is not schema and "properties" in inner:
        node.rules += rules_of(inner)
    return node


# --- markdown (pure) ------------------------------------------------------------------------------------


def code(text: str) -> str:
    """``text`` as a markdown code span, whatever backticks it holds."""
    fence = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def prose(text: str) -> str:
    """A description as markdown: code spans kept, markup characters outside them escaped, one line."""
    parts, last = [], 0
    for match in CODE_SPAN.finditer(text):
        parts += [_escape(text[last:match.start()]), match.group(0)]
        last = match.end()
    parts.append(_escape(text[last:]))
    return " ".join("".join(parts).split())


def _escape(text: str) -> str:
    for char, escaped in (("\\", "\\\\"), ("<", "&lt;"), ("*", "\\*"), ("[", "\\["), ("]", "\\]")):
        text = text.replace(char, escaped)
    return text


def cel(rule: str) -> str:
    flat = " ".join(rule.split())
    if len(flat) <= RULE_CHARS:
        return code(flat)
    return f"{code(flat[:RULE_CHARS] + ' …')} ({len(flat):,} characters; the CRD has it whole)"


def field_entry(node: Field, parent: str) -> list[str]:
    name = node.path.removeprefix(parent + ".") if parent else node.path
    facts = [node.type] + (["required"] if node.required else [])
    if node.has_default:
        facts.append("default " + code(json.dumps(node.default, sort_keys=True)))
    facts += node.validation
    lines = [f"- **{code(name)}** · " + " · ".join(facts)]
    if node.description:
        lines.append(f"    {prose(node.description)}")
    if node.children:  # its rules are in its own section
        lines.append(f"    See [{code(node.members)}](#{anchor(node.members)}).")
    else:
        lines += [f"    - Rule {cel(rule)}: {prose(message)}" for rule, message in node.rules]
    return lines


def anchor(path: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-")


def object_section(node: Field, level: int) -> Iterator[str]:
    yield f"{'#' * level} {code(node.members)} {{ #{anchor(node.members)} }}"
    yield ""
    if node.description:
        yield prose(node.description)
        yield ""
    for rule, message in node.rules:
        yield f"- Rule {cel(rule)}: {prose(message)}"
    if node.rules:
        yield ""
    for child in node.children:
        yield from field_entry(child, node.members)
    yield ""
    for child in node.children:
        if child.children:
            yield from object_section(child, 3)


def count_fields(node: Field) -> int:
    return len(node.children) + sum(count_fields(c) for c in node.children)


def render_page(crd: dict[str, Any], source: str) -> str:
    names, version = crd["spec"]["names"], crd["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    top = walk(schema, "")
    lines = [f"# {names['kind']}", "",
             f"{code(crd['spec']['group'] + '/' + version['name'])} · {crd['spec']['scope']} · short name "
             + ", ".join(code(n) for n in names.get("shortNames", [])) + f" · {count_fields(top)} fields.",
             "",
             f"Generated from {code(source)} by {code('hack/api-reference.py')} at build time (the CRD itself is "
             f"generated from the pydantic models in {code('operator/qwen_fleet/api/')}). "
             f"{code('kubectl explain ' + names.get('shortNames', [names['plural']])[0] + '.spec')} shows the same "
             "descriptions on a cluster.", ""]
    if top.description:
        lines += [prose(top.description), ""]
    columns = version.get("additionalPrinterColumns", [])
    if columns:
        lines += [f"## {code('kubectl get ' + names['plural'])} columns", ""]
        lines += [f"- **{c['name'].upper()}** ({code(c['jsonPath'])})" + (" · only with -o wide"
                  if c.get("priority", 0) > 0 else "") + (f": {prose(c['description'])}" if c.get("description")
                                                           else "") for c in columns]
        lines.append("")
    if top.rules:
        lines += ["## Rules on the whole resource", ""]
        lines += [f"- Rule {cel(rule)}: {prose(message)}" for rule, message in top.rules]
        lines.append("")
    lines += ["## Top-level fields", ""]
    for child in top.children:
        lines += field_entry(child, "")
    lines.append("")
    for child in top.children:
        if child.children:
            lines += list(object_section(child, 2))
    return "\n".join(lines).rstrip() + "\n"


def page_name(kind: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "-", kind).lower() + ".md"


def reference_pages(root: Path = ROOT) -> dict[str, str]:
    """File name -> markdown, one page per CRD in crds/."""
    out = {}
    for path in sorted((root / CRD_DIR).glob("*.yaml")):
        crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        out[page_name(crd["spec"]["names"]["kind"])] = render_page(crd, path.relative_to(root).as_posix())
    return out


# --- links that leave docs/ (pure) ----------------------------------------------------------------------


def published(root: Path = ROOT) -> dict[str, str]:
    """Repository path -> path in the site, for the files outside docs/ that the site carries."""
    out = {f"{BENCH_DIR}/{p.name}": f"{BENCH_SITE_DIR}/{p.name}" for p in sorted((root / BENCH_DIR).iterdir())
           if p.suffix in BENCH_SUFFIXES}
    out.update({k: v for k, v in EXTRA_PAGES.items() if (root / k).is_file()})
    return out


def rewrite_links(markdown: str, page_repo: str, page_site: str, root: Path, site_of: dict[str, str],
                  docs: str = "docs") -> tuple[str, list[str]]:
    """The page's relative links, each resolved from the page's place in the repository and pointed at the same
    file's place in the site; a link to a repository file the site lacks becomes its path in code. Returns the
    new markdown and the links to files that do not exist (left as they are)."""
    missing: list[str] = []

    def one(match: re.Match[str]) -> str:
        bang, text, target, title = match.groups()
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith(("#", "/")):
            return match.group(0)
        path, _, frag = target.partition("#")
        repo = posixpath.normpath(posixpath.join(posixpath.dirname(page_repo), path))
        site = repo[len(docs) + 1:] if repo.startswith(docs + "/") else site_of.get(repo)
        if site is not None:
            rel = posixpath.relpath(site, posixpath.dirname(page_site) or ".")
            return f"{bang}[{text}]({rel}{'#' + frag if frag else ''}{title})"
        if not (root / repo).exists():
            missing.append(target)
            return match.group(0)
        return f"{text} ({code(repo)})" if text and text.strip("`") != repo else code(repo)

    out, fenced = [], False
    for line in markdown.split("\n"):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        out.append(line if fenced else LINK.sub(one, line))
    return "\n".join(out), missing


# --- the MkDocs hook ------------------------------------------------------------------------------------


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for name, text in reference_pages().items():
        files.append(File.generated(config, f"{REFERENCE_DIR}/{name}", content=text))
    for repo, site in published().items():
        files.append(File.generated(config, site, abs_src_path=str(ROOT / repo)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    source = page.file.abs_src_path
    if source is None:  # made from content (the API reference): its links are the generator's own
        return markdown
    docs = Path(config["docs_dir"]).resolve()
    # A page of the docs tree is docs/<its path> in the repository (also for a copy of the tree elsewhere, as
    # the tests build); a published file is where it lies.
    path = Path(source).resolve()
    page_repo = f"docs/{page.file.src_uri}" if path.is_relative_to(docs) else path.relative_to(ROOT).as_posix()
    text, missing = rewrite_links(markdown, page_repo, page.file.src_uri, ROOT, published())
    for target in missing:
        log.warning("Doc file '%s' links to '%s', which is no file of the repository", page.file.src_uri, target)
    return text


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: hack/api-reference.py OUT_DIR  (one markdown page per CRD in crds/)", file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for name, text in reference_pages().items():
        (out / name).write_text(text)
        print(out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

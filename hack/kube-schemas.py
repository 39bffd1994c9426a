"""kubeconform's JSON schemas, generated from the real kube-apiserver's OpenAPI v2 with our CRD and the real
third-party CRDs installed (kubeconform's own schema repository cannot be downloaded here).

    .venv/bin/python hack/kube-schemas.py     prints the folder (a cache: $QF_CACHE/kube-schemas/<key>)

It starts the local control plane once (~15 s), installs our CRDs (crds/*.yaml) and the CRDs of
hack/third-party-crds.sh, reads /openapi/v2 and writes kubeconform's layout: ``_definitions.json`` (every
definition) and one ``<kind>-<group prefix>-<version>.json`` per kind that ``$ref``s into it; use
``-schema-location '<folder>/{{ .ResourceKind }}{{ .KindSuffix }}.json'``. The schemas are strict:
``additionalProperties: false`` on every object that lists its properties (what the apiserver's
``--validate=strict`` refuses as an unknown field), except where the apiserver keeps unknown fields.

OpenAPI v2 rather than v3: one document holds every kind with ``#/definitions`` references that JSON schema
draft 4 (kubeconform's) resolves as they are; v3 is one document per group-version.

Cached, not committed: the output (a few MB) is a pure function of the inputs that make the cache key (the
Kubernetes version, the CRD files, this script), so it is regenerated when one of them changes.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

from qwen_fleet import versions  # noqa: E402
from qwen_fleet_dev import cachelock  # noqa: E402
from qwen_fleet_dev.binaries import cache_root  # noqa: E402

OUR_CRDS = sorted((ROOT / "crds").glob("*.yaml"))  # QwenInference and QwenBatch
# Definitions the apiserver decodes from a string or a number (IntOrString, resource.Quantity).
GENERIC = "io.k8s.apimachinery."  # meta kinds every group-version lists (DeleteOptions, WatchEvent, ...)
STRING_OR_NUMBER = ("io.k8s.apimachinery.pkg.util.intstr.IntOrString", "io.k8s.apimachinery.pkg.api.resource.Quantity")


def crd_files() -> list[Path]:
    out = subprocess.run([str(ROOT / "hack" / "third-party-crds.sh")], check=True, capture_output=True, text=True)
    folder = Path(out.stdout.strip().splitlines()[-1])
    return [*OUR_CRDS, *sorted(folder.glob("*.yaml"))]


def cache_key(files: list[Path]) -> str:
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return f"{versions.KUBERNETES}-{digest.hexdigest()[:16]}"


def _strictify(node: Any) -> Any:
    """JSON schema of one OpenAPI v2 node: strict objects, nullable values, no format assertions."""
    if isinstance(node, list):
        return [_strictify(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: ({f: _strictify(s) for f, s in v.items()} if k == "properties" else _strictify(v))
           for k, v in node.items() if k not in ("format", "description") and not k.startswith("x-")}
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["type"] = ["string", "integer", "null"]
    if "properties" in node and "additionalProperties" not in node \
            and not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    kind = out.get("type")
    if isinstance(kind, str):
        out["type"] = [kind, "null"]  # the apiserver reads an explicit null as "not set"
    return out


def _kind_suffix(group: str, version: str) -> str:
    """kubeconform's {{ .KindSuffix }}: '-' + the group's first label (or the version alone for core)."""
    return f"-{group.split('.', maxsplit=1)[0].lower()}-{version.lower()}" if group else f"-{version.lower()}"


def convert(openapi: dict[str, Any], out: Path) -> int:
    definitions = {name: _strictify(schema) for name, schema in openapi["definitions"].items()}
    for name in STRING_OR_NUMBER:
        definitions[name] = {"type": ["string", "number", "null"]}
    out.mkdir(parents=True)
    (out / "_definitions.json").write_text(json.dumps({"definitions": definitions}, sort_keys=True))
    written: dict[str, str] = {}
    for name, schema in sorted(openapi["definitions"].items(), key=lambda kv: kv[0].startswith(GENERIC)):
        for gvk in schema.get("x-kubernetes-group-version-kind", []):
            file = f"{gvk['kind'].lower()}{_kind_suffix(gvk['group'], gvk['version'])}.json"
            if file in written:
                if name.startswith(GENERIC):
                    continue  # DeleteOptions, WatchEvent, ... list every group-version; a typed kind wins
                # Two groups that share a first label and a kind: kubeconform's layout cannot tell them apart.
                raise SystemExit(f"{file}: both {written[file]} and {name}")
            written[file] = name
            (out / file).write_text(json.dumps({"$ref": f"_definitions.json#/definitions/{name}"}))
    return len(written)


def generate(out: Path, files: list[Path]) -> int:
    from qwen_fleet_dev import binaries
    from qwen_fleet_dev.cluster import LocalCluster

    binaries.ensure()
    with tempfile.TemporaryDirectory(prefix="qf-kube-schemas-") as tmp:
        cluster = LocalCluster(workdir=Path(tmp) / "cluster")
        cluster.start()
        try:
            import yaml

            names = []
            for path in files:
                crd = yaml.safe_load(path.read_text())
                cluster.install_crd(path, crd["metadata"]["name"])
                names += [f"{crd['spec']['group']}/{v['name']}/{crd['spec']['names']['kind']}"
                          for v in crd["spec"]["versions"] if v.get("served")]
            openapi = _openapi_with(cluster, names)
        finally:
            cluster.stop()
    return convert(openapi, out)


def _openapi_with(cluster: Any, gvks: list[str], timeout: float = 60) -> dict[str, Any]:
    """/openapi/v2 once it publishes every CRD kind (the apiserver adds them a moment after Established)."""
    deadline = time.monotonic() + timeout
    while True:
        doc: dict[str, Any] = cluster.rest().get("/openapi/v2")
        have = {f"{g['group']}/{g['version']}/{g['kind']}" for s in doc["definitions"].values()
                for g in s.get("x-kubernetes-group-version-kind", [])}
        missing = sorted(set(gvks) - have)
        if not missing:
            return doc
        if time.monotonic() > deadline:
            raise SystemExit(f"/openapi/v2 never published {missing}")
        time.sleep(1)


def main() -> int:
    files = crd_files()
    out = cache_root() / "kube-schemas" / cache_key(files)

    def done() -> Path | None:
        return out if (out / "_definitions.json").exists() else None

    def build() -> Path:
        tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
        count = generate(tmp, files)
        tmp.rename(out)
        print(f"kube-schemas: {count} kinds from kube-apiserver {versions.KUBERNETES}", file=sys.stderr)
        return out

    # Under the entry's lock: a second run waits for the first's rename instead of failing on it.
    print(cachelock.cached(f"kube-schemas/{out.name}", done, build))
    return 0


if __name__ == "__main__":
    sys.exit(main())

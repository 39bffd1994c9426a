"""Hypothesis strategies for QwenInference documents: mostly mutations of valid specs (so that many are
accepted and reach the operator), steered by the CRD's own OpenAPI schema (boundary numbers, enum values,
strings that almost match a pattern), plus wild values of any type, huge numbers, unicode and long strings.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from tests.chaos.helpers import qwi, small_spec

ROOT = Path(__file__).resolve().parents[2]
CRD_FILE = ROOT / "crds" / "qwenfleet.io_qweninferences.yaml"
Path_ = tuple[str | int, ...]
F = TypeVar("F")  # what a fuzz knows of a field: its schema, or a value strategy


def spec_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD_FILE.read_text())
    return dict(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"])


def leaf_paths(schema: dict[str, Any], prefix: Path_ = ()) -> list[tuple[Path_, dict[str, Any]]]:
    """Every field of the schema with its own schema, objects included (a mutation may replace a subtree)."""
    out: list[tuple[Path_, dict[str, Any]]] = [(prefix, schema)] if prefix else []
    if schema.get("type") == "object" and "properties" in schema:
        for key, sub in schema["properties"].items():
            out += leaf_paths(sub, (*prefix, key))
    elif schema.get("type") == "array" and isinstance(schema.get("items"), dict):
        out += leaf_paths(schema["items"], (*prefix, 0))
    return out


def base_specs() -> list[dict[str, Any]]:
    """Valid starting points: every example, and the small spec in shapes that schedule in the chaos cluster."""
    bases = [yaml.safe_load(p.read_text())["spec"] for p in sorted((ROOT / "examples").glob("*.yaml"))]
    bases.append(small_spec(64))
    bases.append(small_spec(128) | {"replicas": 2})
    bases.append(small_spec(32) | {"autoscaling": {"enabled": True, "maxReplicas": 3}})
    bases.append(small_spec(256) | {"parallelism": {"tensor": 2}, "nccl": {"preflight": {"enabled": True}}})
    return bases


# Anything at all: the values a hand-written or generated manifest might put in the wrong place.
_scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(-10, 100), st.integers(-(2**70), 2**70), st.sampled_from([2**31, 2**53 + 1, 2**63, 10**30]),
    st.floats(allow_nan=False, allow_infinity=False), st.sampled_from([0.5, 1.0, -0.0, 1e300, 1e-300]),
    st.text(max_size=40), st.text(min_size=300, max_size=3000),
    st.sampled_from(["", " ", "8\n", "16Gi\n", "25%\n", "a b", "\u00a0", "x\u2028y", "Qwen/Qwen3\u00a04B",
                     "🦙", "null", "true", "1e3", "0x10", "-1", "٣"]),
)
wild = st.recursive(_scalars, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                      st.dictionaries(st.text(max_size=12), kids, max_size=4)),
                    max_leaves=8)


def _near(bound: float | None) -> st.SearchStrategy[Any]:
    if bound is None:
        return st.nothing()
    b = int(bound)
    return st.one_of(st.integers(b - 2, b + 2), st.sampled_from([bound - 0.5, bound + 0.5, float(bound)]))


def _valid_or_not(valid: st.SearchStrategy[Any], *invalid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Five draws in six are meant to be valid, so that many specs get through to the operator."""
    if not invalid:
        return valid
    return st.sampled_from([True] * 5 + [False]).flatmap(lambda ok: valid if ok else st.one_of(*invalid))


def typed(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values of about the right type for a schema node: mostly valid, often at or just over a bound."""
    kind = schema.get("type")
    low, high = schema.get("minimum"), schema.get("maximum")
    if "enum" in schema:
        return _valid_or_not(st.sampled_from(schema["enum"]), st.text(max_size=12))
    if schema.get("x-kubernetes-int-or-string"):
        pattern = schema.get("pattern", r"^[0-9]+$")
        return _valid_or_not(st.one_of(st.integers(0, 10**6), st.from_regex(pattern, fullmatch=True)),
                             st.integers(-5, -1), st.from_regex(pattern), st.text(max_size=10),
                             st.sampled_from(["1.5", "1e3", "1E400", "1e99999999", "99999999999999999999Ei",
                                             "16Gi\n", 2**70]))
    if kind == "integer":
        lo = int(low) if low is not None else -(2**31)
        hi = int(high) if high is not None else 2**31
        return _valid_or_not(st.integers(lo, hi), _near(low), _near(high), st.integers(-(2**40), 2**40),
                             st.just(2**64))
    if kind == "number":
        lo_f = float(low) if low is not None else -1e6
        hi_f = float(high) if high is not None else 1e6
        return _valid_or_not(st.floats(lo_f, hi_f, exclude_min=bool(schema.get("exclusiveMinimum"))),
                             _near(low), _near(high), st.floats(-1e6, 1e6))
    if kind == "boolean":
        return _valid_or_not(st.booleans(), st.sampled_from(["true", "yes", 1, 0]))
    if kind == "string":
        pattern = schema.get("pattern")
        size = int(schema.get("maxLength", 64))
        valid = (st.from_regex(pattern, fullmatch=True).filter(lambda v: len(v) <= size) if pattern
                 else st.text(max_size=min(size, 80)))
        invalid = [st.text(max_size=min(size + 2, 80))]
        if pattern:
            invalid.append(st.from_regex(pattern))  # may end in a newline that `$` lets through
        if size <= 1024:  # just at and just over the limit; Hypothesis cannot make 32 KiB strings
            invalid.append(st.text(min_size=size, max_size=size + 1))
        return _valid_or_not(valid, *invalid)
    if kind == "array":
        item = schema.get("items") or {}
        return st.lists(typed(item) if item else wild, max_size=int(schema.get("maxItems", 4)) + 1)
    if kind == "object" and "additionalProperties" in schema:
        return st.dictionaries(st.text(max_size=20), typed(schema["additionalProperties"]), max_size=3)
    if kind == "object" and "properties" in schema:
        return st.fixed_dictionaries({}, optional={k: typed(v) for k, v in schema["properties"].items()})
    return wild


def set_path(doc: dict[str, Any], path: Path_, value: Any) -> None:
    """Set ``path`` (an int step means the first item of a list), creating what is missing on the way."""
    cur: Any = doc
    for key, nxt in itertools.pairwise(path):
        if isinstance(key, int):
            if not isinstance(cur, list) or not cur:
                return
            cur = cur[0]
            continue
        if not isinstance(cur, dict):
            return
        if not isinstance(cur.get(key), (dict, list)):
            cur[key] = [{}] if isinstance(nxt, int) else {}
        cur = cur[key]
    last = path[-1]
    if isinstance(last, int):
        if isinstance(cur, list):
            cur[:1] = [value]
    elif isinstance(cur, dict):
        cur[last] = value


def delete_path(doc: dict[str, Any], path: Path_) -> None:
    cur: Any = doc
    for key in path[:-1]:
        if isinstance(key, int):
            if not isinstance(cur, list) or not cur:
                return
            cur = cur[0]
        elif isinstance(cur, dict) and key in cur:
            cur = cur[key]
        else:
            return
    if isinstance(cur, dict):
        cur.pop(path[-1], None)


NAME = st.one_of(st.just("fuzz"), st.from_regex(r"^[a-z]([-a-z0-9]*[a-z0-9])?$"),
                 st.text(min_size=1, max_size=60), st.sampled_from(["fuzz\n", "q" * 52, "q" * 53, "7b"]))


@st.composite
def documents(draw: st.DrawFn, bases: list[dict[str, Any]],
              fields: list[tuple[Path_, dict[str, Any]]]) -> dict[str, Any]:
    spec = copy.deepcopy(draw(st.sampled_from(bases)))
    for _ in range(draw(st.sampled_from([1, 1, 1, 1, 2, 2, 3]))):
        mutate(draw, spec, fields, typed)
    name = draw(NAME) if draw(st.integers(0, 19)) == 0 else "fuzz"
    return qwi(name, spec)


def mutate(draw: st.DrawFn, spec: dict[str, Any], fields: Sequence[tuple[Path_, F]],
           values_of: Callable[[F], st.SearchStrategy[Any]]) -> None:
    """One edit of a field drawn from ``fields``: mostly a value of its own type (``values_of`` its entry), else
    any JSON value, the field deleted, or an unknown sibling field (both fuzzes, QwenInference and QwenBatch,
    draw their edits here)."""
    how = draw(st.sampled_from(["typed"] * 8 + ["wild", "delete", "unknown"]))
    path, field = draw(st.sampled_from(fields))
    if how == "typed":
        set_path(spec, path, draw(values_of(field)))
    elif how == "wild":
        set_path(spec, path, draw(wild))
    elif how == "delete":
        delete_path(spec, path)
    else:
        set_path(spec, (*path[:-1], draw(st.text(min_size=1, max_size=15))), draw(wild))


def draw_documents(count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` distinct documents, the same ones for the same seed. Hypothesis drives the generation (its
    bias to boundaries and odd text); the checks then run on the whole batch, in bulk, against the cluster."""
    seen: dict[str, dict[str, Any]] = {}

    @hypothesis_seed(seed)
    @settings(max_examples=count * 2, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(documents(base_specs(), leaf_paths(spec_schema())))
    def collect(doc: dict[str, Any]) -> None:
        if len(seen) < count:
            seen.setdefault(json.dumps(doc, sort_keys=True), doc)

    collect()
    return list(seen.values())

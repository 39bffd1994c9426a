"""The kopf adapter (reconcile/adapter.py): the only module of the operator that imports kopf, and the guards that
fail when kopf changes under one of its fixes.

A fix swaps an attribute of a kopf module; it takes effect only while kopf's own callers look that name up through
the module at call time (``watching.infinite_watch(...)``), not through a name bound at import (``from .watching
import infinite_watch``), which one upstream refactor would make silently inert. These read kopf's installed source
(its syntax tree, not our copy of it) for exactly the lookups each fix needs, and the stream's shape fix 3 reads.
The behaviour of each fix has its own tests: test_kopf_patches.py (1), test_kopf_watch_patches.py (2),
test_kopf_relist.py (3).
"""

from __future__ import annotations

import ast
import importlib.metadata
import inspect
import re
import textwrap
from pathlib import Path
from types import ModuleType

import pytest
from kopf._cogs.aiokits import aiotoggles
from kopf._cogs.clients import scanning, watching
from kopf._core.reactor import observation, orchestration, queueing

from qwen_fleet.reconcile import adapter

OPERATOR = Path(adapter.__file__).resolve().parents[1]
KOPF_IMPORT = re.compile(r"^\s*(import kopf\b|from kopf\b)", re.MULTILINE)


def _calls(module: ModuleType, holder: str, attribute: str, inside: str | None = None) -> int:
    """How many calls ``holder.attribute(...)`` the module's source makes (within function ``inside``, if named)."""
    tree: ast.AST = ast.parse(inspect.getsource(module))
    if inside is not None:
        tree = next(n for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef | ast.FunctionDef)
                    and n.name == inside)
    return sum(1 for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
               and n.func.attr == attribute and isinstance(n.func.value, ast.Name) and n.func.value.id == holder)


def _binds(module: ModuleType, name: str) -> bool:
    """Whether the module binds ``name`` at import (``from x import name``): a swap of x.name would not reach it."""
    tree = ast.parse(inspect.getsource(module))
    return any(isinstance(n, ast.ImportFrom) and any(a.name == name for a in n.names) for n in ast.walk(tree))


def test_the_adapter_is_the_only_module_that_imports_kopf() -> None:
    importers = sorted(str(p.relative_to(OPERATOR)) for p in OPERATOR.rglob("*.py")
                       if KOPF_IMPORT.search(p.read_text()))
    assert importers == ["reconcile/adapter.py"]


def test_kopf_is_the_version_the_fixes_were_written_against() -> None:
    # A new kopf may have fixed what we fix, or moved what we swap: read adapter.py's fixes against it, then pin it.
    assert importlib.metadata.version("kopf") == "1.45.2"


def test_fix_1_kopfs_gate_methods_are_still_looked_up_on_the_class() -> None:
    for name in ("make_toggle", "drop_toggle", "drop_toggles"):
        assert inspect.iscoroutinefunction(getattr(aiotoggles.ToggleSet, name)), name
    # The fix reaches the set's private state as kopf 1.45 keeps it.
    source = inspect.getsource(aiotoggles.ToggleSet)
    assert "self._toggles" in source and "self._condition" in source


def test_fixes_2_and_3_kopf_reaches_the_stream_and_the_watcher_through_their_modules() -> None:
    assert _calls(queueing, "watching", "infinite_watch", inside="watcher") == 1
    assert not _binds(queueing, "infinite_watch")
    for caller in (orchestration, observation):  # where kopf starts its watchers
        assert _calls(caller, "queueing", "watcher") >= 1, caller.__name__
        assert not _binds(caller, "watcher"), caller.__name__


def test_fix_3_the_stream_lists_with_type_none_ends_a_listing_with_listed_and_relists_after_410() -> None:
    source = textwrap.dedent(inspect.getsource(watching.continuous_watch))
    assert "yield {'type': None, 'object': obj}" in source  # a listed object
    assert "yield Bookmark.LISTED" in source  # the end of a listing
    assert re.search(r"\['code'\] == 410:.*?return", source, re.DOTALL), "410 Gone no longer ends the stream"
    # kopf's own infinite_watch (not the fix, which another test in this process may have put in its place) starts
    # a new continuous_watch (a new listing) each time one ends.
    kopfs = adapter.ORIGINAL_INFINITE_WATCH
    assert kopfs.__module__ == watching.__name__ and kopfs.__name__ == "infinite_watch"
    assert "continuous_watch(" in inspect.getsource(kopfs)
    # kopf itself still reports nothing for an object a relist no longer holds (else fix 3 would say it twice).
    assert "DELETED" not in inspect.getsource(kopfs)


def test_the_rescan_calls_kopfs_functions_with_the_arguments_they_take() -> None:
    scan = inspect.signature(scanning.scan_resources).parameters
    assert {"groups", "settings", "logger"} <= set(scan)
    revise = inspect.signature(observation.revise_resources).parameters
    assert {"resources", "insights", "registry", "group"} <= set(revise)


@pytest.mark.parametrize("name", ["infinite_watch", "watcher"])
def test_apply_patches_puts_the_fixes_where_kopf_looks_them_up(name: str) -> None:
    adapter.apply_patches()
    module = watching if name == "infinite_watch" else queueing
    assert getattr(module, name) is getattr(adapter, f"_{name}")

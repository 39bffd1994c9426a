"""bench.native_memory's attribution of one allocation's stack, and its RSS split by mapping."""

from __future__ import annotations

import os
from pathlib import Path

from bench.native_memory import classify, owner, smaps_split

SITE = "/work/.venv/lib/python3.11/site-packages"
STDLIB = "/usr/lib/python3.11"


def test_owner_names_the_package_a_file_belongs_to() -> None:
    assert owner(f"{SITE}/kopf/_core/reactor/queueing.py") == "kopf"
    assert owner(f"{SITE}/six.py") == "six"
    assert owner("/work/main/operator/qwen_fleet/reconcile/store.py") == "qwen_fleet"
    assert owner(f"{STDLIB}/json/decoder.py") == "(stdlib) json/decoder.py"


def test_classify_skips_allocator_frames_and_takes_the_innermost_python_frame() -> None:
    stack = [("_PyObject_Malloc", "Objects/obmalloc.c", 2003),
             ("_PyObject_ArenaMmap", "Objects/obmalloc.c", 1500),
             ("PyUnicode_New", "Objects/unicodeobject.c", 1200),
             ("scanstring_unicode", "Modules/_json.c", 400),
             ("raw_decode", f"{STDLIB}/json/decoder.py", 353),
             ("loads", f"{STDLIB}/json/__init__.py", 346),
             ("deserialize", f"{SITE}/kubernetes/client/api_client.py", 270)]
    assert classify(stack) == ("(stdlib) json/decoder.py", "(stdlib) json/decoder.py:raw_decode", "PyUnicode_New")


def test_classify_says_when_a_stack_has_no_python_frame_or_only_allocators() -> None:
    assert classify([("malloc", "", 0), ("CRYPTO_malloc", "", 0), ("SSL_read", "", 0)]) == \
        ("(no Python frame)", "(no Python frame)", "SSL_read")
    assert classify([("malloc", "", 0)]) == ("(no Python frame)", "(no Python frame)", "(allocator only)")
    # a native frame above the innermost Python frame is the interpreter running it, not the allocation site
    assert classify([("_PyObject_Malloc", "", 0), ("f", "/x/tests/a.py", 1), ("PyEval_EvalCode", "", 0)]) == \
        ("tests", "tests:f", "(allocator only)")


def test_smaps_split_adds_up_to_the_resident_set() -> None:
    split = smaps_split(os.getpid())
    status = Path("/proc/self/status").read_text()
    rss_mib = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))) / 1024
    assert {"file", "anonymous"} <= set(split)
    assert abs(sum(split.values()) - rss_mib) < max(2.0, 0.05 * rss_mib)

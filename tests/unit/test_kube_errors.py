"""How API errors are read: which ones are retried, which stall the resource, which mean "leave it be"."""

from __future__ import annotations

import json

from qwen_fleet.reconcile.kube import _error

# The body kube-apiserver v1.36 returned here for a create in a namespace being deleted (captured in a test run).
TERMINATING = {
    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Forbidden", "code": 403,
    "message": 'deployments.apps "qwen3-4b" is forbidden: unable to create new content in namespace t-9647f788 '
               "because it is being terminated",
    "details": {"name": "qwen3-4b", "group": "apps", "kind": "deployments",
                "causes": [{"reason": "NamespaceTerminating", "message": "namespace t-9647f788 is being terminated",
                            "field": "metadata.namespace"}]},
}


def test_a_create_in_a_terminating_namespace_is_recognised() -> None:
    err = _error(403, json.dumps(TERMINATING).encode())
    assert err.namespace_terminating
    assert not err.transient
    assert err.causes == ("NamespaceTerminating",)


def test_other_forbidden_errors_are_not_taken_for_it() -> None:
    rbac = dict(TERMINATING, message='deployments.apps "x" is forbidden: User "u" cannot create resource', details={})
    assert not _error(403, json.dumps(rbac)).namespace_terminating
    # the cause alone, with another status code, is not it either
    assert not _error(409, json.dumps(dict(TERMINATING, code=409))).namespace_terminating


def test_bodies_that_are_not_a_status_still_give_an_error() -> None:
    assert _error(502, b"<html>bad gateway</html>").transient
    assert _error(403, b"[1, 2]").status == 403  # JSON, but not an object
    assert _error(500, json.dumps({"message": "x", "details": {"causes": ["odd"]}})).causes == ()

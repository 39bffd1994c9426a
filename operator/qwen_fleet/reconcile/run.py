"""Start the operator: check what it needs first and say in one line what is missing, then run kopf."""

from __future__ import annotations

import logging
import os
import sys

from qwen_fleet.api import GROUP, PLURAL, VERSION
from qwen_fleet.config import OperatorConfig
from qwen_fleet.reconcile.kinds import batch_permissions, child_permissions

# (verb, group, resource, subresource): what the operator cannot work without.
REQUIRED = (
    ("watch", GROUP, PLURAL, ""),
    ("patch", GROUP, PLURAL, "status"),
    *child_permissions(),
    ("watch", "", "pods", ""),
    ("create", "", "events", ""),
    *batch_permissions(),
)
# With leader election, in the Lease's namespace: read it, create it the first time, renew it (asked with the
# Lease's name: the chart grants get and update on that name only).
LEASE_REQUIRED = (("get", "coordination.k8s.io", "leases", ""), ("create", "coordination.k8s.io", "leases", ""),
                  ("update", "coordination.k8s.io", "leases", ""))


def preflight(config: OperatorConfig) -> str | None:
    """None when the operator can run; otherwise one line saying what is wrong."""
    import yaml
    from kubernetes.config import ConfigException

    from qwen_fleet.reconcile.kube import KubeClient, KubeError

    try:
        kube = KubeClient.from_environment(workers=1)
    except (ConfigException, OSError, ValueError, TypeError, AttributeError, yaml.YAMLError) as err:
        detail = str(err).splitlines()[0] if str(err) else type(err).__name__
        where = os.environ.get("KUBECONFIG", "~/.kube/config")
        return f"cannot load Kubernetes credentials from {where} (or in-cluster): {detail}"
    try:
        try:
            kube._request_sync("GET", "/version")
        except KubeError as err:
            if err.status in (401, 403):
                return (f"the Kubernetes API at {kube.api.configuration.host} refused the credentials: "
                        f"{err.status} {err.message or err.reason}")
            return f"cannot reach the Kubernetes API at {kube.api.configuration.host}: {err.message or err.reason}"
        try:
            kube._request_sync("GET", f"/apis/{GROUP}/{VERSION}")
        except KubeError as err:
            if err.status == 404:
                return (f"the QwenInference CRD ({PLURAL}.{GROUP}) is not installed: kubectl apply -f "
                        f"crds/{GROUP}_{PLURAL}.yaml, or helm install the chart")
            return f"cannot read the {GROUP} API: {err}"
        missing = []
        namespace = config.namespaces[0] if config.namespaces else ""
        checks = [(req, namespace, "") for req in REQUIRED]
        if config.leader_election:
            checks += [(req, config.lease_namespace, config.lease_name) for req in LEASE_REQUIRED]
        for (verb, group, resource, sub), where, object_name in checks:
            attributes = {"verb": verb, "group": group, "resource": resource, "subresource": sub, "namespace": where}
            if object_name and verb != "create":
                attributes["name"] = object_name
            review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                      "spec": {"resourceAttributes": attributes}}
            answer = kube._request_sync("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                                        body=review)
            if not (answer or {}).get("status", {}).get("allowed"):
                name = f"{resource}{'/' + sub if sub else ''}{'.' + group if group else ''}"
                missing.append(f"{verb} {name}")
        if missing:
            return "missing RBAC permissions: " + ", ".join(missing) + " (the chart's ClusterRole grants them)"
        return None
    except KubeError as err:
        return f"Kubernetes API error during startup checks: {err}"
    finally:
        kube.close()


def run_operator(verbose: bool = False) -> int:
    config = OperatorConfig.from_env()
    logging.basicConfig(level=logging.DEBUG if verbose else getattr(logging, config.log_level, logging.INFO),
                        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s", stream=sys.stderr)
    for noisy in ("kubernetes", "aiohttp"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # urllib3 warns once per connection retry ("Retrying (Retry(total=2 ...)"); the request's final error is
    # reported by us in one line (start-up) or by the reconcile that made it, so its retries are noise.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    # A kubeconfig with insecure-skip-tls-verify (local clusters) is the user's choice: say it once, not per call.
    import urllib3

    urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    problem = preflight(config)
    if problem:
        print(f"qwen-fleet: {problem}", file=sys.stderr)
        return 2
    if config.webhook_port > 0:  # before kopf: every replica answers the webhook, leader or not
        from qwen_fleet.admission.server import start_from_config

        start_from_config(config)
    from qwen_fleet.reconcile import adapter, handlers

    adapter.apply_patches()  # before kopf starts (adapter.py says what each fix is for)
    registry = adapter.new_registry()
    runtime = handlers.Runtime(config)
    from qwen_fleet.reconcile import metrics

    problem = metrics.serve(config.metrics_port, runtime)  # before kopf: a taken port ends the process, once
    if problem:
        print(f"qwen-fleet: {problem}", file=sys.stderr)
        return 2
    runtime.kopf = adapter.new_handles(registry)
    handlers.register(registry, runtime)
    adapter.run(runtime.kopf, runtime.stop_flag, list(config.namespaces),
                     f"http://0.0.0.0:{config.liveness_port}/healthz" if config.liveness_port > 0 else None)
    # kopf has stopped and the shutdown handler has run (handlers.py: bounded). An API thread still waiting on an
    # apiserver that has gone (a request of a cancelled reconcile) would hold the interpreter's exit for its whole
    # timeout and retries, minutes (concurrent.futures joins every worker thread at exit): nothing is left to do
    # that needs it, so the process ends here.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(runtime.exit_code)

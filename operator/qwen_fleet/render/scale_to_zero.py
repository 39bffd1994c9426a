"""Scale to zero (autoscaling.scaleToZero) through the KEDA HTTP add-on v0.15.0 (github.com/kedacore/http-add-on).

The add-on's interceptor is a reverse proxy that routes by Host (and path, headers) to a target Service, counts
the requests it holds or forwards per route, and holds a request while the target Service has no ready endpoint
(interceptor/middleware/endpoint_resolver.go, pkg/k8s/ready_endpoints_cache.go: it watches EndpointSlices). Its
external scaler polls every interceptor for those counts and pushes "active" to KEDA as soon as a route has a
request (scaler/handlers.go StreamIsActive, every 200 ms); KEDA's scale handler then scales the workload from 0
to 1 at once, outside its polling loop (KEDA pkg/scaling/scale_handler.go startPushScalers). Three children:

- an ``InterceptorRoute`` (http.keda.sh/v1beta1, the add-on's routing CRD since v0.14): the fleet's Host names
  -> the fleet's Service, with the hold time as its readiness timeout;
- an ``external-push`` trigger on the fleet's own ScaledObject (render/keda.py) naming that route: the add-on's
  operator makes no ScaledObject for an InterceptorRoute (operator/controllers/http/interceptorroute_controller.go
  only marks it Ready), so ours stays the fleet's one autoscaler;
- a Service ``<fleet>-proxy`` of type ExternalName for the interceptor's proxy Service: an in-cluster address
  that works at zero replicas (the fleet's own Service has no endpoint then, and a connection to it is refused).
  Its owner is the InterceptorRoute, not the QwenInference: when scale to zero is turned off (or the engine
  switched) the operator deletes the route, and the garbage collector takes the Service with it. The operator
  itself is never given `delete` on Services (reconcile/kinds.py). The route's uid is known only once it exists,
  so the rendered reference has none; reconcile/changes.py fills it in (and holds the Service back until then).
"""

from __future__ import annotations

from typing import Any

from qwen_fleet.api import QwenInference
from qwen_fleet.api.scaling import ScaleToZero
from qwen_fleet.render.common import HTTP_PORT_NAME, INSTANCE_LABEL, common_labels, endpoint_url, metadata

INTERCEPTOR_ROUTE_API = "http.keda.sh/v1beta1"
PROXY_SUFFIX = "-proxy"
# The add-on's external scaler reads the route from this trigger metadata key (pkg/k8s/scaledobject.go
# InterceptorRouteKey) and is reached at scalerAddress (KEDA pkg/scalers/external_scaler.go).
ROUTE_KEY = "interceptorRoute"
SCALER_ADDRESS_KEY = "scalerAddress"
# The interceptor's count of a route's requests (held or in flight) only wakes the fleet (any request makes the
# trigger active). As an HPA metric this target keeps it from ever asking for a second replica
# (ceil(requests / target) is 1), so the count above one stays with the queue-depth and KV-cache triggers, as
# with engine hpa.
WAKE_ONLY_CONCURRENCY_TARGET = 1_000_000


def scale_to_zero(cr: QwenInference) -> ScaleToZero | None:
    """The fleet's scale-to-zero settings when it scales to zero (autoscaling on, engine keda), else None."""
    auto = cr.spec.autoscaling
    return auto.scale_to_zero if auto.enabled and auto.engine == "keda" else None


def proxy_service_name(cr: QwenInference) -> str:
    return cr.name + PROXY_SUFFIX


def proxy_hosts(cr: QwenInference, stz: ScaleToZero) -> list[str]:
    """The Host names a client of ``<fleet>-proxy`` sends (the interceptor strips the port: pkg/routing/key.go),
    short to fully qualified, then the spec's own."""
    name, ns, domain = proxy_service_name(cr), cr.namespace, stz.http_add_on.cluster_domain
    own = [name, f"{name}.{ns}", f"{name}.{ns}.svc", f"{name}.{ns}.svc.{domain}"]
    return own + [h for h in stz.hosts if h not in own]


def client_endpoint(cr: QwenInference) -> str:
    """Where clients send requests (status.endpoint): a fleet that scales to zero through the interceptor, as its
    own Service refuses connections while the fleet has no pod; any other fleet at its Service."""
    stz = scale_to_zero(cr)
    if stz is None:
        return endpoint_url(cr)
    return f"http://{proxy_service_name(cr)}.{cr.namespace}.svc:{stz.http_add_on.interceptor_port}/v1"


def scaler_address(stz: ScaleToZero) -> str:
    # As the add-on's own operator writes it for an HTTPScaledObject (operator/controllers/http/config/config.go
    # HostName): <service>.<namespace>:<port>, resolved from KEDA's pod.
    add_on = stz.http_add_on
    return f"{add_on.scaler_service}.{add_on.namespace}:{add_on.scaler_port}"


def external_push_trigger(cr: QwenInference, stz: ScaleToZero) -> dict[str, Any]:
    return {"type": "external-push", "name": "held-requests", "metricType": "AverageValue",
            "metadata": {SCALER_ADDRESS_KEY: scaler_address(stz), ROUTE_KEY: cr.name}}


def render_interceptor_route(cr: QwenInference, stz: ScaleToZero) -> dict[str, Any]:
    return {
        "apiVersion": INTERCEPTOR_ROUTE_API,
        "kind": "InterceptorRoute",
        "metadata": metadata(cr),
        "spec": {
            # port, not portName: the interceptor then needs no read of the Service per request
            # (interceptor/middleware/routing.go resolvePort).
            "target": {"service": cr.name, "port": cr.spec.service.port},
            "rules": [{"hosts": proxy_hosts(cr, stz)}],
            "scalingMetric": {"concurrency": {"targetValue": WAKE_ONLY_CONCURRENCY_TARGET}},
            "timeouts": {
                # How long a request waits for a ready endpoint (EndpointResolver); then 504.
                "readiness": f"{stz.hold_timeout_seconds}s",
                # No deadline on the whole request (the add-on's default, written out so that a cluster-wide
                # KEDA_HTTP_REQUEST_TIMEOUT cannot cut a long generation short; per-route values win).
                "request": "0s",
                # Off, not the add-on's 300 s: vLLM sends the headers of a non-streamed completion only once the
                # whole answer is generated, which for a long answer takes longer than that.
                "responseHeader": "0s",
            },
        },
    }


def route_owner(cr: QwenInference) -> dict[str, Any]:
    """The proxy Service's owner: the fleet's InterceptorRoute, by kind and name (changes.py adds its uid).
    Without blockOwnerDeletion: that would need `update` on interceptorroutes/finalizers where the
    OwnerReferencesPermissionEnforcement admission plugin is on, and nothing waits for the Service to go."""
    return {"apiVersion": INTERCEPTOR_ROUTE_API, "kind": "InterceptorRoute", "name": cr.name, "controller": True}


def render_proxy_service(cr: QwenInference, stz: ScaleToZero) -> dict[str, Any]:
    add_on = stz.http_add_on
    target = f"{add_on.interceptor_service}.{add_on.namespace}.svc.{add_on.cluster_domain}"
    # Not the pods' selector label: the fleet's ServiceMonitor selects Services by it, and this one has no pods.
    labels = {k: v for k, v in common_labels(cr).items() if k != INSTANCE_LABEL}
    labels["app.kubernetes.io/component"] = "interceptor-route"
    meta = metadata(cr, name=proxy_service_name(cr), labels=labels)
    if "ownerReferences" in meta:  # the operator's render (an offline render has no owners at all)
        meta["ownerReferences"] = [route_owner(cr)]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "type": "ExternalName",
            "externalName": target,
            # An ExternalName Service maps no port: clients use the interceptor's own (listed for them to read).
            "ports": [{"name": HTTP_PORT_NAME, "port": add_on.interceptor_port, "protocol": "TCP",
                       "appProtocol": "http"}],
        },
    }

"""``spec.routing``: the Gateway API Inference Extension in front of the fleet (opt-in; docs/routing.md).

With it the operator makes an InferencePool (inference.networking.k8s.io/v1) over the fleet's serving pods, the
endpoint picker (EPP) that chooses a replica per request from each one's live vLLM metrics, and, when a Gateway
is named, an HTTPRoute whose backend is the pool. Without it nothing changes: the plain Service stays the only
way in, spread by kube-proxy.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from qwen_fleet import versions
from qwen_fleet.api.base import DNS_LABEL, DNS_SUBDOMAIN, IMAGE, ApiModel, Quantity, Rule

# The Gateway API's Duration (HTTPRoute timeouts): 1-4 groups of a number and a unit, e.g. 300s, 1h30m.
GATEWAY_DURATION = r"^([0-9]{1,5}(h|m|s|ms)){1,4}$"
# Inference Extension priorities are plain integers; a bound keeps the negated vLLM value well inside int32.
MAX_CLASS_PRIORITY = 1_000_000
# spec.pools: the header a client names its pool in. Lower-case letters, digits and '-' (HTTP/2 sends header
# names in lower case; Gateway API matches them case-insensitively); not one the Inference Extension reads.
POOL_HEADER = "x-qwen-pool"
HEADER_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# routing.gateway.implementation: what the Gateway's class is. A gateway that implements the Inference
# Extension takes the InferencePool as a backendRef; Envoy Gateway (v1.7.0) does not know that kind, so the
# operator renders its own policies that make Envoy ask the picker and honour its choice (docs/gateway.md).
GatewayImplementation = Literal["InferencePool", "EnvoyGateway"]
INFERENCE_POOL_GATEWAY: GatewayImplementation = "InferencePool"
ENVOY_GATEWAY: GatewayImplementation = "EnvoyGateway"


def vllm_priority(objective_priority: int) -> int:
    """The vLLM request ``priority`` of a request class, from its InferenceObjective priority.

    The two run in opposite directions: the Inference Extension serves a higher priority first
    (apix/v1alpha2 InferenceObjectiveSpec.Priority), vLLM's ``--scheduling-policy priority`` a lower value
    first. Negation keeps the order and the shared default: a request with no class is 0 to both."""
    return -objective_priority


class GatewayRef(ApiModel):
    """The Gateway (gateway.networking.k8s.io/v1) the HTTPRoute attaches to."""

    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN, description="The Gateway's name.")
    namespace: str | None = Field(default=None, min_length=1, max_length=63, pattern=DNS_LABEL,
                                  description="The Gateway's namespace (default: the fleet's). Its listener must "
                                  "allow routes from the fleet's namespace (allowedRoutes).")
    section_name: str | None = Field(default=None, min_length=1, max_length=253, pattern=DNS_SUBDOMAIN,
                                     description="One listener of the Gateway (parentRefs.sectionName); default: "
                                     "every listener that accepts the route.")
    request_timeout: str = Field(default="600s", max_length=32, pattern=GATEWAY_DURATION,
                                 description="HTTPRoute rules.timeouts.request: how long the gateway waits for a "
                                 "whole response (a long generation streams for minutes; gateways default to "
                                 "as little as 15 s).")
    implementation: GatewayImplementation = Field(
        default=INFERENCE_POOL_GATEWAY, description="What implements the Gateway's class. InferencePool: a "
        "gateway conformant to the Inference Extension (the route's backendRef is the InferencePool, the gateway "
        "calls the picker itself). EnvoyGateway: Envoy Gateway (v1.7.0), which has no InferencePool backend: the "
        "route's backend is the fleet's Service, an EnvoyExtensionPolicy sends each request to the picker "
        "(ext_proc) and a BackendTrafficPolicy makes Envoy send it to the replica the picker named "
        "(x-gateway-destination-endpoint), retrying the picker's fallbacks on a connect failure or reset.")
    route_by_model: bool = Field(default=False, description="Many fleets behind one Gateway, chosen by the "
                                 "request's model: the route matches only requests whose X-Gateway-Model-Name "
                                 "header is the fleet's served model name or one of serving.adapters' names. The "
                                 "Inference Extension's Body-Based Router, attached to the Gateway, writes that "
                                 "header from the body's model field (docs/gateway.md). Two fleets may not claim "
                                 "one name on one Gateway: the later one is Stalled, naming the first.")


class Scorers(ApiModel, rules=[Rule(
    cel="self.queueDepth + self.kvCacheUsage + self.prefixCache > 0",
    check=lambda s: s.queue_depth + s.kv_cache_usage + s.prefix_cache > 0,
    message="routing.scorers: at least one weight must be above 0, or the endpoint picker chooses blindly",
)]):
    """Weights of the endpoint picker's scorers (EPP v1.5.0 plugins); 0 leaves a scorer out. Each scores a
    replica from 0 to 1, the picker takes the highest weighted sum. The defaults are upstream's own
    (queue 2, KV cache 2, prefix 3): docs/routing.md says why they suit Qwen."""

    queue_depth: int = Field(default=2, ge=0, le=100, description="queue-scorer: fewer waiting requests "
                             "(vllm:num_requests_waiting) score higher.")
    kv_cache_usage: int = Field(default=2, ge=0, le=100, description="kv-cache-utilization-scorer: a less "
                                "full KV cache (vllm:kv_cache_usage_perc) scores higher.")
    prefix_cache: int = Field(default=3, ge=0, le=100, description="prefix-cache-scorer: a replica that "
                              "likely holds the prompt's prefix in its KV cache (the picker's bounded LRU "
                              "index of the prefixes it sent where) scores higher.")


class EndpointPicker(ApiModel):
    """The endpoint picker's Deployment (one replica: its prefix index lives in memory)."""

    image: str = Field(default=f"registry.k8s.io/gateway-api-inference-extension/epp:"
                       f"{versions.GATEWAY_API_INFERENCE_EXTENSION}", max_length=512, pattern=IMAGE,
                       description="The EPP image. Default: upstream's v1.5.0 build (cmd/epp). The llm-d "
                       "router's endpoint picker takes the same flags and config file.")
    failure_mode: Literal["FailOpen", "FailClose"] | None = Field(
        default=None, description="What the gateway does while the picker does not answer: FailOpen sends the "
        "request to a replica of its own choosing (the fleet keeps serving), FailClose refuses it (a 5xx). "
        "Default: FailOpen, but FailClose behind Envoy Gateway (routing.gateway.implementation EnvoyGateway), "
        "which cannot fail open with the picker's full-duplex body mode.")
    cpu: Quantity = Field(default="1", description="CPU request of the picker (no limit: it bursts).")
    memory: Quantity = Field(default="1Gi", description="Memory request and limit of the picker.")


class PriorityClass(ApiModel):
    """A request class: an InferenceObjective named ``<fleet>-<name>`` that clients name in the
    ``x-gateway-inference-objective`` header, and the vLLM ``priority`` they put in the request body."""

    name: str = Field(min_length=1, max_length=63, pattern=DNS_LABEL, description="The class, e.g. "
                      "interactive or batch.")
    priority: int = Field(ge=-MAX_CLASS_PRIORITY, le=MAX_CLASS_PRIORITY, description="Inference Extension "
                          "priority: higher is served first (the picker's flow control and shedding). The vLLM "
                          "request priority of the class is its negation (vLLM runs lower values first); "
                          "requests without a class are 0 to both.")


class KeySecretRef(ApiModel):
    """A Secret in the fleet's namespace holding API keys: each data key is a client's name, its value that
    client's key (Envoy Gateway's APIKeyAuth credentialRefs format)."""

    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN, description="The Secret's name (in "
                      "the fleet's namespace).")


class ApiKeys(ApiModel, rules=[Rule(
    cel="self.secretRefs.all(a, self.secretRefs.exists_one(b, b.name == a.name))",
    check=lambda k: len({s.name for s in k.secret_refs}) == len(k.secret_refs),
    message="routing.auth.apiKeys.secretRefs names must be unique",
)]):
    """API keys the gateway checks on every request to the fleet's route."""

    secret_refs: list[KeySecretRef] = Field(min_length=1, max_length=16, description="Secrets of the fleet's "
                                            "namespace, each data key a client name and its value the client's "
                                            "key (e.g. kubectl create secret generic qwen-keys "
                                            "--from-literal=team-a=sk-...). A client sends its key as an "
                                            "OpenAI client does, Authorization: Bearer <key>; a request without "
                                            "a known key is answered 401 by the gateway. A key may appear in "
                                            "only one client of all the Secrets (Envoy Gateway refuses "
                                            "duplicates). The operator never reads the keys; with the chart's "
                                            "rbac.keySecrets it checks that each Secret exists (Stalled "
                                            "APIKeySecretNotFound) by its metadata only.")


class RoutingAuth(ApiModel):
    """Who may call the fleet through the gateway."""

    api_keys: ApiKeys | None = Field(default=None, description="Require an API key (Envoy Gateway's "
                                     "SecurityPolicy apiKeyAuth on the fleet's HTTPRoute).")


class Canary(ApiModel):
    """Another fleet that gets a share of this fleet's route: the new revision of the same model."""

    fleet: str = Field(min_length=1, max_length=63, pattern=DNS_LABEL, description="The QwenInference in this "
                       "namespace that receives the canary share. It must serve this fleet's served model name "
                       "and its adapters (else Stalled CanaryModelMismatch); it does not need spec.routing of "
                       "its own.")
    weight: int = Field(ge=0, le=100, description="Percent of the route's requests sent to the canary fleet; "
                        "this fleet keeps the rest (status.traffic says both). Changing it moves no connection: "
                        "each new request is split by the new weights.")


def on_envoy_gateway(r: RoutingSpec) -> bool:
    return r.gateway is not None and r.gateway.implementation == ENVOY_GATEWAY


def failure_mode(r: RoutingSpec) -> str:
    """routing.endpointPicker.failureMode, or the default of the gateway it is behind."""
    if r.endpoint_picker.failure_mode is not None:
        return r.endpoint_picker.failure_mode
    return "FailClose" if on_envoy_gateway(r) else "FailOpen"


class RoutingSpec(ApiModel, rules=[Rule(
    cel="!has(self.priorityClasses) || "
        "self.priorityClasses.all(a, self.priorityClasses.exists_one(b, b.name == a.name))",
    check=lambda r: len({c.name for c in r.priority_classes}) == len(r.priority_classes),
    message="routing.priorityClasses names must be unique",
), Rule(
    cel="!self.poolHeader.startsWith('x-gateway-')",
    check=lambda r: not r.pool_header.startswith("x-gateway-"),
    message="routing.poolHeader must not start with x-gateway-: the Inference Extension reads and writes those "
            "headers (x-gateway-inference-objective, x-gateway-destination-endpoint)",
), Rule(
    cel="!has(self.gateway) || !has(self.gateway.implementation) || self.gateway.implementation != 'EnvoyGateway' "
        "|| !has(self.endpointPicker) || !has(self.endpointPicker.failureMode) "
        "|| self.endpointPicker.failureMode != 'FailOpen'",
    check=lambda r: not (on_envoy_gateway(r) and r.endpoint_picker.failure_mode == "FailOpen"),
    message="routing.endpointPicker.failureMode FailOpen cannot be had behind Envoy Gateway: the picker needs "
            "Envoy's full-duplex body mode, with which Envoy Gateway v1.7.0 refuses failOpen (its ExtProc rule); "
            "remove failureMode (FailClose is the default there) or set it to FailClose",
), Rule(
    cel="!has(self.auth) || !has(self.auth.apiKeys) || (has(self.gateway) && has(self.gateway.implementation) && "
        "self.gateway.implementation == 'EnvoyGateway')",
    check=lambda r: r.auth is None or r.auth.api_keys is None or on_envoy_gateway(r),
    message="routing.auth.apiKeys is enforced by Envoy Gateway's SecurityPolicy: set routing.gateway with "
            "implementation EnvoyGateway; a gateway of another implementation gets no key check from the operator, "
            "so use serving.apiKeySecretRef there (vLLM's own key check)",
), Rule(
    cel="!has(self.canary) || has(self.gateway)",
    check=lambda r: r.canary is None or r.gateway is not None,
    message="routing.canary splits the fleet's HTTPRoute by weight: set routing.gateway (the Gateway the route "
            "attaches to)",
)]):
    """Inference-aware routing through the Gateway API Inference Extension (v1.5.0)."""

    gateway: GatewayRef | None = Field(default=None, description="Attach an HTTPRoute to this Gateway, with "
                                       "the InferencePool as its backend. Without it only the pool and the "
                                       "picker are made (for a route written elsewhere).")
    endpoint_picker: EndpointPicker = Field(default_factory=EndpointPicker, description="The endpoint picker.")
    scorers: Scorers = Field(default_factory=Scorers, description="How the picker weighs replicas.")
    priority_classes: list[PriorityClass] = Field(default_factory=list, max_length=16, description="Request "
                                                  "classes (e.g. interactive 10, batch 0; a negative priority is "
                                                  "shed by the picker when the pool is saturated). Non-empty "
                                                  "turns on vLLM's --scheduling-policy priority.")
    pool_header: str = Field(default=POOL_HEADER, min_length=1, max_length=64, pattern=HEADER_NAME,
                             description="With spec.pools: the request header whose value names the pool a "
                             "request goes to (the HTTPRoute matches it exactly, Gateway API core). A client picks "
                             "the first pool whose maxRequestTokens holds its prompt plus max_tokens "
                             "(status.pools lists them).")
    default_pool: str | None = Field(default=None, min_length=1, max_length=12, pattern=DNS_LABEL,
                                     description="With spec.pools: where a request without the pool header goes. "
                                     "Default: the last (longest) pool, the only one every request fits.")
    auth: RoutingAuth | None = Field(default=None, description="Access control at the gateway (needs "
                                     "routing.gateway.implementation EnvoyGateway): API keys from Secrets.")
    canary: Canary | None = Field(default=None, description="Send a share of this fleet's route to another "
                                  "fleet serving the same model name (a new revision: other weights or engine "
                                  "settings). The route's backends are both fleets, weighted; the canary fleet "
                                  "may route by model to the same Gateway without being Stalled ModelNameClaimed "
                                  "as long as this fleet claimed the name first. Not with spec.pools.")

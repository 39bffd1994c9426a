"""routing.auth.apiKeys: an API key on the fleet's route, checked by Envoy Gateway (docs/gateway.md, "Keys"). Pure.

The SecurityPolicy (gateway.envoyproxy.io/v1alpha1, Envoy Gateway v1.7.0 api/v1alpha1/api_key_auth_types.go) names
the key Secrets and nothing else: Envoy Gateway reads each Secret's data itself (every data key a client name, its
value that client's key) and programs Envoy's api_key_auth filter, which answers 401 to a request without a known
key. No key ever passes through the operator, its status, its Events or any object it writes.
"""

from __future__ import annotations

from typing import Any

from qwen_fleet.api import QwenInference
from qwen_fleet.render.common import common_labels, metadata
from qwen_fleet.render.routing import ENVOY_GATEWAY_GROUP, route_target

KEY_SECRET_REASON = "APIKeySecretNotFound"  # a Stalled reason: a Secret of routing.auth.apiKeys does not exist
# routing.auth.apiKeys: where the key is read (Envoy's api_key_auth filter strips a "Bearer " prefix, so the
# header an OpenAI client sends works as is).
API_KEY_HEADER = "Authorization"


def render_security_policy(cr: QwenInference) -> dict[str, Any]:
    """Envoy Gateway: require an API key on the fleet's route (SecurityPolicy apiKeyAuth, v1.7.0). Only the
    Secrets' names are written here; Envoy Gateway reads the keys from them itself. The key is removed from the
    request before it reaches vLLM (sanitize), unless the fleet also asks vLLM to check one
    (serving.apiKeySecretRef), which then needs the same header."""
    refs = [{"group": "", "kind": "Secret", "name": name} for name in key_secret_names(cr)]
    return {
        "apiVersion": f"{ENVOY_GATEWAY_GROUP}/v1alpha1",
        "kind": "SecurityPolicy",
        "metadata": metadata(cr, labels=common_labels(cr)),
        "spec": {
            "targetRefs": [route_target(cr)],
            "apiKeyAuth": {"credentialRefs": refs, "extractFrom": [{"headers": [API_KEY_HEADER]}],
                           "sanitize": cr.spec.serving.api_key_secret_ref is None},
        },
    }


def key_secret_names(cr: QwenInference) -> list[str]:
    """The Secrets routing.auth.apiKeys names (in the fleet's namespace)."""
    routing = cr.spec.routing
    if routing is None or routing.auth is None or routing.auth.api_keys is None:
        return []
    return [ref.name for ref in routing.auth.api_keys.secret_refs]

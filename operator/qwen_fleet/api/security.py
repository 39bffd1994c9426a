"""``spec.security`` and the names no spec may take: who the engine runs as, the reserved environment, the
extraArgs flags that carry secrets.

Every fleet pod passes the Pod Security Standard ``restricted`` profile (docs/security.md): no privilege
escalation, every capability dropped, seccomp RuntimeDefault, a numeric non-root user. What vLLM may need
beyond that is an explicit, typed opt-in here, never a free-form securityContext.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from qwen_fleet.api.base import DNS_SUBDOMAIN, ApiModel, Rule
from qwen_fleet.api.engine_flags import flag_key, owned_dest, vllm_flags

# The engine's user and group: uid 1000 is the first ordinary user of Debian and Ubuntu images (vLLM's
# upstream image is Ubuntu), and images/vllm makes it a named user. The pod sets HOME and USER itself, so an
# image without a passwd entry for it runs too (Python's getpass.getuser() reads USER first).
ENGINE_UID = 1000
ENGINE_GID = 1000
_MAX_ID = 2**31 - 1


class ApiKeySecretRef(ApiModel):
    """A key of a Secret in the fleet's namespace; referenced by the pod, never copied by the operator."""

    name: str = Field(description="Name of the Secret.", min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    key: str = Field(default="api-key", description="Key inside the Secret.", min_length=1, max_length=253,
                     pattern=r"^[-._a-zA-Z0-9]+$")


def fleet_api_key_ref(fleet: Mapping[str, Any]) -> ApiKeySecretRef | None:
    """The Secret key a fleet's vLLM checks (``spec.serving.apiKeySecretRef``), from the QwenInference as the API
    returns it; None for a fleet that takes requests without a key. Its clients (a QwenBatch's Job, the
    bench-serving Job) reference the same key, never a copy of it."""
    raw = ((fleet.get("spec") or {}).get("serving") or {}).get("apiKeySecretRef")
    return ApiKeySecretRef.model_validate(raw) if raw else None


class PodSecurity(ApiModel):
    """Who the fleet's pods run as, and the one capability vLLM may need beyond the restricted profile."""

    run_as_user: int = Field(default=ENGINE_UID, ge=1, le=_MAX_ID, description="Numeric user of every fleet "
                             "container (runAsUser; never 0: pods run as non-root). The engine image must let "
                             "it read the Python install; HOME, the model cache and /tmp are volumes.")
    run_as_group: int = Field(default=ENGINE_GID, ge=1, le=_MAX_ID, description="Numeric group (runAsGroup) "
                              "and fsGroup: the model cache claim and the pod's volumes are made writable to it.")
    ipc_lock: bool = Field(default=False, description="Add the IPC_LOCK capability to the engine (and the NCCL "
                           "preflight): RDMA/InfiniBand (GPUDirect RDMA) registers pinned memory. Outside the "
                           "restricted and baseline profiles: the namespace must allow privileged pods.")


# Environment variables no user list (engine.env, nccl.env) may set, and who sets them. A second definition of
# a name makes server-side apply refuse the pod template (env is a map keyed by name) or silently shadows ours.
RESERVED_ENV: dict[str, str] = {
    # the operator, from typed fields (render/deployment.py, render/prefetch.py)
    "HOME": "the operator (the pod's writable home, spec.security)",
    "USER": "the operator (the engine's user name, spec.security)",
    "HF_HOME": "the operator (the model cache, model.cache)",
    "HF_HUB_OFFLINE": "the operator (model.source.pvc, model.cache.prefetch)",
    "HF_HUB_DISABLE_TELEMETRY": "the operator",
    "HF_ENDPOINT": "the operator (model.source.huggingFace.endpoint)",
    "HF_TOKEN": "the operator (model.source.huggingFace.tokenSecretRef)",
    "VLLM_USE_MODELSCOPE": "the operator (model.source.modelScope)",
    "MODELSCOPE_CACHE": "the operator (model.source.modelScope)",
    "MODELSCOPE_DOMAIN": "the operator (model.source.modelScope.domain)",
    "MODELSCOPE_API_TOKEN": "the operator (model.source.modelScope.tokenSecretRef)",
    "VLLM_API_KEY": "the operator (serving.apiKeySecretRef)",
    "VLLM_PORT": "the operator (service.port)",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "the operator (nccl.asyncErrorHandling)",
    "NCCL_DEBUG": "the operator (nccl.debug)",
    "NCCL_IB_DISABLE": "the operator (nccl.ibDisable)",
    "NCCL_P2P_DISABLE": "the operator (nccl.p2pDisable)",
    "NCCL_SOCKET_IFNAME": "the operator (nccl.socketIfname)",
    # the GPU device plugin: which devices the container sees (another value escapes the GPU allocation)
    "NVIDIA_VISIBLE_DEVICES": "the GPU device plugin",
    "CUDA_VISIBLE_DEVICES": "vLLM's launch (from the GPUs the device plugin gave the pod)",
    # the LeaderWorkerSet webhook (multi-node groups)
    "LWS_LEADER_ADDRESS": "the LeaderWorkerSet webhook (parallelism.nodes)",
    "LWS_GROUP_SIZE": "the LeaderWorkerSet webhook (parallelism.nodes)",
    "LWS_WORKER_INDEX": "the LeaderWorkerSet webhook (parallelism.nodes)",
    # vLLM's own launch: data-parallel ranks and the torch.distributed world, from parallelism.*
    "VLLM_DP_RANK": "vLLM's launch (parallelism.data)",
    "VLLM_DP_RANK_LOCAL": "vLLM's launch (parallelism.dataLocal)",
    "VLLM_DP_SIZE": "vLLM's launch (parallelism.data)",
    "VLLM_DP_MASTER_IP": "vLLM's launch (parallelism.nodes)",
    "VLLM_DP_MASTER_PORT": "vLLM's launch (parallelism.nodes)",
    "RANK": "vLLM's launch (torch.distributed)",
    "LOCAL_RANK": "vLLM's launch (torch.distributed)",
    "WORLD_SIZE": "vLLM's launch (torch.distributed)",
    "LOCAL_WORLD_SIZE": "vLLM's launch (torch.distributed)",
    "MASTER_ADDR": "vLLM's launch (torch.distributed)",
    "MASTER_PORT": "vLLM's launch (torch.distributed)",
}


def first_reserved(env: Any) -> str | None:
    return next((v.name for v in env if v.name in RESERVED_ENV), None)


def reserved_env_message(field: str) -> str:
    # One static text: a messageExpression naming the variable exceeds the apiserver's CEL cost estimate.
    return (f"{field} must not set a variable that the operator, the GPU device plugin, the LeaderWorkerSet "
            f"webhook or vLLM's launch sets ({', '.join(RESERVED_ENV)}): use the typed field (docs/security.md "
            "says which)")


def cel_no_reserved(env: str) -> str:
    return f"!has({env}) || {env}.all(e, !(e.name in {list(RESERVED_ENV)}))"


def cel_unique_names(env: str) -> str:
    return f"!has({env}) || {env}.all(e, {env}.exists_one(f, f.name == e.name))"


def unique_names(env: Any) -> bool:
    names = [v.name for v in env]
    return len(names) == len(set(names))


# extraArgs flags whose value is a secret: in extraArgs it would sit in plain text in the Deployment, readable
# by anyone who may read the fleet's workloads. The typed, Secret-backed field for each.
SECRET_FLAGS: dict[str, str] = {
    "--api-key": "serving.apiKeySecretRef (a Secret key, passed as VLLM_API_KEY through secretKeyRef)",
    "--hf-token": "model.source.huggingFace.tokenSecretRef (a Secret key, passed as HF_TOKEN through "
                  "secretKeyRef)",
}
# extraArgs flags whose value is a secret, in every form vLLM's parser reads as them.
SECRET_OPTIONS = frozenset(option for flag in vllm_flags().flags if set(flag.options) & set(SECRET_FLAGS)
                           for option in flag.options)
# ... and every key vLLM's parser resolves to one of them (--api-k abbreviates --api-key): a short literal for CEL,
# instead of vLLM's whole option table (the extraArgs rules share one runtime cost budget).
SECRET_KEYS = sorted({option[:n] for option in SECRET_OPTIONS for n in range(3, len(option) + 1)
                      if owned_dest(option[:n], SECRET_OPTIONS)})


def secret_flag(arg: str) -> bool:
    """Whether vLLM reads this extraArgs token as a flag whose value is a secret (--api-key, --hf-token)."""
    key = flag_key(arg)
    return key is not None and owned_dest(key, SECRET_OPTIONS)


def not_a_flag_rule(field: str, attr: str) -> Rule:
    """A value rendered after a flag (--model X, hf download X) must not itself read as one: argparse and the
    download CLIs take ``--help`` for their own option (``hf download --help`` exits 0, an empty "download")."""
    return Rule(cel=f"!has(self.{field}) || !self.{field}.startsWith('-')",
                check=lambda m: getattr(m, attr) is None or not str(getattr(m, attr)).startswith("-"),
                message=f"model.{field} must not begin with '-': vLLM and the model download would read it as a "
                        "flag", field_path=f".{field}")


SECRET_FLAGS_MESSAGE = ("engine.extraArgs must not carry a secret (--api-key, --hf-token): it would be stored in "
                        "plain text in the Deployment; use " + "; ".join(
                            f"{v} for {k}" for k, v in SECRET_FLAGS.items()))


# engine.env and nccl.env land in one container's env: a name in both is a duplicate key there.
ENV_SPEC_RULES = [Rule(
    cel="!has(self.nccl.env) || !has(self.engine.env) || "
        "self.nccl.env.all(n, !self.engine.env.exists(e, e.name == n.name))",
    check=lambda s: not {v.name for v in s.nccl.env} & {v.name for v in s.engine.env},
    message="engine.env and nccl.env must not set the same variable (both land in the engine container)",
)]

# LeaderWorkerSet (sigs.k8s.io/lws) names a group's leader pod <name>-<group> and the group's worker StatefulSet
# after it; the StatefulSet controller labels each worker pod controller-revision-hash=<statefulset>-<hash>,
# the hash a uint32 written in up to 10 characters (controller.ComputeHash), and a label value holds 63 at most.
# So <name> + 1 + digits(last group index) + 1 + 10 <= 63. A longer name gets a leader but never its workers.
_LWS_REVISION_LABEL_ROOM = 63 - 1 - 1 - 10
_CEL_GROUPS = ("(self.spec.autoscaling.enabled && has(self.spec.autoscaling.maxReplicas) ? "
               "self.spec.autoscaling.maxReplicas : (has(self.spec.replicas) ? self.spec.replicas : 1))")
_CEL_LAST_GROUP_DIGITS = f"size(string({_CEL_GROUPS} > 0 ? {_CEL_GROUPS} - 1 : 0))"


def _groups(spec: Any) -> Any:
    scaling = spec.autoscaling
    if scaling.enabled and scaling.max_replicas is not None:
        return scaling.max_replicas
    return spec.replicas if spec.replicas is not None else 1


def lws_name_limit(spec: Any) -> int:
    """The longest metadata.name of a multi-node fleet with this many groups (replicas or maxReplicas)."""
    groups = _groups(spec)
    return _LWS_REVISION_LABEL_ROOM - len(str(groups - 1 if groups > 0 else 0))


LWS_NAME_RULE = Rule(
    cel=f"self.spec.parallelism.nodes == 1 || size(self.metadata.name) <= {_LWS_REVISION_LABEL_ROOM} - "
        f"{_CEL_LAST_GROUP_DIGITS}",
    check=lambda r: r.spec.parallelism.nodes == 1 or len(r.metadata.get("name", "")) <= lws_name_limit(r.spec),
    message="metadata.name is too long for a multi-node fleet: LeaderWorkerSet labels each worker pod "
            "controller-revision-hash=<name>-<group>-<hash of up to 10 characters>, and a label value holds at most "
            "63 characters, so the name may have 51 characters less the digits of the last group index (50 for up "
            "to 10 groups, 49 up to 100, 48 up to 1000; groups: replicas, or autoscaling.maxReplicas)",
)

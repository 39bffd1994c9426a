"""The plan: everything render needs that is derived rather than written in the spec. Pure.

Defaults live here (served model name, image, /dev/shm size, memory including shm and KV offload), and so do
the checks only the operator can make (the model fits the GPU, tensor size divides the heads). A plan with
``problems`` must not be applied: the resource is Stalled instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from decimal import Decimal

from pydantic import ValidationError

from qwen_fleet.api import QwenInference, QwenInferenceSpec
from qwen_fleet.api.messages import validation_message
from qwen_fleet.api.pools import Pool, pool_engine
from qwen_fleet.api.resource import CapacityStatus
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import quantities as q
from qwen_fleet.plan.capacity import Problem  # a reason the spec cannot be served: Stalled's reason/message
from qwen_fleet.plan.serving import ServingPlan, plan_serving

__all__ = ["HF_HOME", "MODEL_MOUNT", "Plan", "PoolPlan", "Problem", "default_shm_bytes", "make_plan", "pool_view"]

MODEL_MOUNT = "/models"
# Outside HOME (an emptyDir): a mount point inside another volume is made by root, unwritable to the engine.
HF_HOME = "/var/cache/huggingface"


@dataclass(frozen=True)
class Plan:
    name: str
    namespace: str
    image: str
    served_model_name: str
    model_ref: str  # what vLLM's --model gets: a repo id, or a directory on the mounted claim
    gpus_per_replica: int
    gpus_per_pod: int  # gpus_per_replica / nodes: what each pod (leader or worker) requests
    nodes: int  # pods per replica; above 1 the replica is a LeaderWorkerSet group
    replicas: int | None  # None: the autoscaler owns the count
    max_replicas: int
    shm_size: str
    memory: str | None
    cpu: str | None
    capacity: CapacityStatus | None
    problems: tuple[Problem, ...] = ()
    warnings: tuple[str, ...] = field(default=())
    serving: ServingPlan | None = None  # task, parsers, thinking, YaRN (plan/serving.py)
    # The kind of the fleet's autoscaler (autoscaling.engine): HorizontalPodAutoscaler, ScaledObject (KEDA), or
    # None without autoscaling.
    autoscaler: str | None = None
    # The kinds spec.routing makes that come from other projects' CRDs (InferencePool; InferenceObjective with
    # priority classes; HTTPRoute with a gateway): reconcile/workload.py stalls a spec whose kind is not served.
    routing_kinds: tuple[str, ...] = ()
    # spec.pools: each pool planned as the fleet it is (pool_view), shortest first. The fleet's own replicas are
    # their sum, its capacity None (each pool has its own).
    pools: tuple[PoolPlan, ...] = ()
    # autoscaling.scaleToZero (engine keda): the KEDA HTTP add-on's InterceptorRoute is made, so its CRD must be
    # served (reconcile/workload.py).
    scale_to_zero: bool = False
    # With scale to zero, where a cold start gets the weights (reconcile/cold_start.py model_cached_condition):
    # "claim" (source.pvc), "prefetched" (model.cache with prefetch), "cached" (model.cache), "downloaded" (a hub
    # source without model.cache: every new pod downloads them again). None without scale to zero.
    cold_start_weights: str | None = None

    @property
    def feasible(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class PoolPlan:
    pool: Pool
    view: QwenInference  # the fleet as this pool serves it (pool_view)
    plan: Plan


def pool_view(cr: QwenInference, pool: Pool) -> QwenInference:
    """The fleet as one of its pools serves it: spec.engine with the pool's settings over it, the pool's replicas,
    no pools. Raises ValidationError when the merged engine breaks one of EngineSpec's own rules."""
    spec = cr.spec.model_copy(update={"engine": pool_engine(cr.spec.engine, pool), "replicas": pool.replicas,
                                      "pools": []})
    return cr.model_copy(update={"spec": spec})


def default_shm_bytes(gpus: int) -> int:
    # One GPU: vLLM's single process barely uses shm. Several: workers exchange tensors through it
    # (vLLM docs); production charts use 8-20Gi for TP. 4Gi per GPU, capped at 32Gi.
    if gpus <= 1:
        return q.GiB
    return min(4 * gpus, 32) * q.GiB


def make_plan(cr: QwenInference, config: OperatorConfig) -> Plan:
    if cr.spec.pools:
        return _plan_pools(cr, config)
    return _plan_fleet(cr, config)


def _plan_pools(cr: QwenInference, config: OperatorConfig) -> Plan:
    """Each pool planned on its own (its maxModelLen decides what fits); their problems are the fleet's, each
    naming its pool."""
    pools: list[PoolPlan] = []
    problems: list[Problem] = []
    warnings: list[str] = []
    for pool in cr.spec.pools:
        try:
            view = pool_view(cr, pool)
        except ValidationError as err:
            problems.append(Problem("InvalidPool", f"pools[{pool.name}]: {validation_message(err)}"))
            continue
        plan = _plan_fleet(view, config)
        pools.append(PoolPlan(pool, view, plan))
        problems += [replace(p, message=f"pools[{pool.name}]: {p.message}") for p in plan.problems]
        warnings += [f"pools[{pool.name}]: {w}" for w in plan.warnings]
    base = _plan_fleet(cr, config, assess_capacity=False)
    total = sum(p.replicas for p in cr.spec.pools)
    return replace(base, replicas=total, max_replicas=total, problems=tuple(problems), warnings=tuple(warnings),
                   serving=pools[-1].plan.serving if pools else base.serving, pools=tuple(pools))


def _plan_fleet(cr: QwenInference, config: OperatorConfig, assess_capacity: bool = True) -> Plan:
    spec = cr.spec
    gpus = spec.gpus_per_pod  # memory, shm and offload are per pod (0 on device CPU)
    shm = q.parse(spec.resources.shm_size) if spec.resources.shm_size is not None else Decimal(
        default_shm_bytes(gpus))
    memory = None
    if spec.resources.memory is not None:
        # The memory-backed /dev/shm and CPU KV offload both count against the container's memory limit.
        total = q.parse(spec.resources.memory) + shm
        total += Decimal(str(spec.engine.kv_offload_gi_b or 0)) * q.GiB
        total += Decimal(str(spec.engine.cpu_offload_gi_b or 0)) * q.GiB * gpus
        memory = q.format_bytes(total)
    if spec.model.source.pvc is not None:
        model_ref = MODEL_MOUNT + spec.model.source.pvc.path.rstrip("/") if spec.model.source.pvc.path != "/" \
            else MODEL_MOUNT
    else:
        model_ref = spec.model.name
    autoscaling = spec.autoscaling
    replicas = None if autoscaling.enabled else (spec.replicas if spec.replicas is not None else 1)
    max_replicas = (autoscaling.max_replicas or autoscaling.min_replicas) if autoscaling.enabled else (
        replicas or 0)
    from qwen_fleet.plan.planner import assess  # the capacity part has its own module

    capacity, problems, warnings = assess(spec) if assess_capacity else (None, [], [])
    scale_to_zero = autoscaling.enabled and autoscaling.engine == "keda" and autoscaling.scale_to_zero is not None
    serving, serving_problems = plan_serving(spec, spec.model.served_model_name or cr.name)
    return Plan(
        name=cr.name,
        namespace=cr.namespace,
        image=spec.engine.image or config.default_image,
        served_model_name=spec.model.served_model_name or cr.name,
        model_ref=model_ref,
        gpus_per_replica=spec.gpus_per_replica,
        gpus_per_pod=gpus,
        nodes=spec.parallelism.nodes,
        replicas=replicas,
        max_replicas=max_replicas,
        shm_size=q.format_bytes(shm),
        memory=memory,
        cpu=str(spec.resources.cpu) if spec.resources.cpu is not None else None,
        capacity=capacity,
        problems=tuple(problems + serving_problems),
        warnings=tuple(warnings),
        serving=serving,
        autoscaler=None if not autoscaling.enabled else (
            "ScaledObject" if autoscaling.engine == "keda" else "HorizontalPodAutoscaler"),
        routing_kinds=_routing_kinds(spec),
        scale_to_zero=scale_to_zero,
        cold_start_weights=_cold_start_weights(spec) if scale_to_zero else None,
    )


def _cold_start_weights(spec: QwenInferenceSpec) -> str:
    model = spec.model
    if model.source.pvc is not None:
        return "claim"
    if model.cache is None:
        return "downloaded"
    return "prefetched" if model.cache.prefetch.enabled else "cached"


def _routing_kinds(spec: QwenInferenceSpec) -> tuple[str, ...]:
    routing = spec.routing
    if routing is None:
        return ()
    envoy_gateway = routing.gateway is not None and routing.gateway.implementation == "EnvoyGateway"
    return ("InferencePool", *(("InferenceObjective",) if routing.priority_classes else ()),
            *(("HTTPRoute",) if routing.gateway is not None else ()),
            *(("EnvoyExtensionPolicy", "BackendTrafficPolicy") if envoy_gateway else ()),
            *(("SecurityPolicy",) if envoy_gateway and routing.auth is not None and routing.auth.api_keys else ()))

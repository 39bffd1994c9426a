"""``spec.pools``: length-aware pools, one endpoint over several Deployments of one model tuned for different
request lengths (issue 17 item 3, seed 000; docs/routing.md "Length-aware pools").

Each pool is a Deployment ``<fleet>-<pool>`` of the same model, with its own length bound, replica count and
batching settings, behind its own InferencePool and endpoint picker; the fleet's HTTPRoute sends a request to
the pool its client names in the ``routing.poolHeader`` header (an exact match, Gateway API core), and a request
without it to ``routing.defaultPool`` (default: the longest pool, the one every request fits). The pools'
bounds are published in ``status.pools`` and in docs/routing.md: a client picks the first pool whose
``maxRequestTokens`` holds its prompt plus ``max_tokens``.
"""

from __future__ import annotations

from pydantic import Field

from qwen_fleet.api.base import DNS_LABEL, ApiModel, Rule
from qwen_fleet.api.engine import EngineSpec

MAX_POOLS = 8
# <fleet>-<pool>-epp names a Service: a DNS-1035 label of at most 63 characters (api/resource.py POOL_NAME_RULE).
MAX_POOL_NAME = 12
# Engine fields a pool may set: the ones that make a pool short or long. Everything else (model, image,
# parsers, adapters, quantization, caching) is the fleet's, so the pools cannot drift apart.
POOL_ENGINE_FIELDS = ("max_model_len", "max_num_seqs", "max_num_batched_tokens")
_MAX_TOKENS = 16_777_216


class PoolEngine(ApiModel, rules=[Rule(
    cel="!has(self.maxNumBatchedTokens) || !has(self.maxNumSeqs) || self.maxNumBatchedTokens >= self.maxNumSeqs",
    check=lambda e: e.max_num_batched_tokens is None or e.max_num_seqs is None
    or e.max_num_batched_tokens >= e.max_num_seqs,
    message="pools[].engine.maxNumBatchedTokens must be at least maxNumSeqs (each running sequence needs a "
            "token in every batch)",
)]):
    """The pool's batching settings, over ``spec.engine`` (which may not set maxModelLen with pools)."""

    max_model_len: int | None = Field(default=None, ge=16, le=_MAX_TOKENS, description="The pool's "
                                      "--max-model-len. Default: the pool's maxRequestTokens. Never below it.")
    max_num_seqs: int | None = Field(default=None, ge=1, le=65536, description="The pool's --max-num-seqs "
                                     "(default: spec.engine.maxNumSeqs, else vLLM's). Many for a short pool, few "
                                     "for a long one.")
    max_num_batched_tokens: int | None = Field(default=None, ge=1, le=_MAX_TOKENS, description="The pool's "
                                               "--max-num-batched-tokens (default: spec.engine's, else vLLM's).")


class Pool(ApiModel, rules=[Rule(
    cel="!has(self.engine.maxModelLen) || self.engine.maxModelLen >= self.maxRequestTokens",
    check=lambda p: p.engine.max_model_len is None or p.engine.max_model_len >= p.max_request_tokens,
    message="pools[].engine.maxModelLen must be at least the pool's maxRequestTokens: the pool would refuse "
            "requests it is sent for",
)]):
    """One pool: a Deployment of the fleet's model for requests up to ``maxRequestTokens`` tokens."""

    name: str = Field(min_length=1, max_length=MAX_POOL_NAME, pattern=DNS_LABEL, description="The pool, e.g. "
                      "short or long: its Deployment is <fleet>-<name>, and clients send it as the value of "
                      "routing.poolHeader.")
    max_request_tokens: int = Field(ge=16, le=_MAX_TOKENS, description="The longest request this pool is for: "
                                    "prompt tokens plus max_tokens. The pools' bounds increase strictly in list "
                                    "order; a request belongs to the first pool whose bound holds it.")
    replicas: int = Field(default=1, ge=0, le=1000, description="Replicas of this pool.")
    engine: PoolEngine = Field(default_factory=PoolEngine, description="The pool's vLLM batching settings, "
                               "over spec.engine.")

    @property
    def max_model_len(self) -> int:
        return self.engine.max_model_len if self.engine.max_model_len is not None else self.max_request_tokens


def pool_engine(engine: EngineSpec, pool: Pool) -> EngineSpec:
    """``spec.engine`` with the pool's settings over it, checked by EngineSpec's own rules (a pool's
    maxNumBatchedTokens below its maxModelLen with chunked prefill off is refused here: the planner stalls)."""
    values = engine.model_dump(by_alias=True, exclude_none=True, mode="json")
    values["maxModelLen"] = pool.max_model_len
    for name in POOL_ENGINE_FIELDS[1:]:
        value = getattr(pool.engine, name)
        if value is not None:
            values[EngineSpec.model_fields[name].alias or name] = value
    return EngineSpec.model_validate(values)


# The rules of spec.pools that read other parts of the spec (QwenInferenceSpec carries them).
POOL_SPEC_RULES: list[Rule] = [
    Rule(cel="!has(self.pools) || self.pools.all(a, self.pools.exists_one(b, b.name == a.name))",
         check=lambda s: len({p.name for p in s.pools}) == len(s.pools),
         message="pools[].name must be unique"),
    Rule(cel="!has(self.pools) || (self.pools.map(p, p.maxRequestTokens).isSorted() && "
             "self.pools.all(a, self.pools.exists_one(b, b.maxRequestTokens == a.maxRequestTokens)))",
         check=lambda s: all(s.pools[i].max_request_tokens < s.pools[i + 1].max_request_tokens
                             for i in range(len(s.pools) - 1)),
         message="pools must be listed from the shortest to the longest, each maxRequestTokens above the one "
                 "before (the bounds split request lengths into ranges that neither overlap nor leave gaps)"),
    Rule(cel="!has(self.pools) || !has(self.replicas)",
         check=lambda s: not s.pools or s.replicas is None,
         message="spec.replicas cannot be set with pools: set pools[].replicas"),
    Rule(cel="!has(self.pools) || !self.autoscaling.enabled",
         check=lambda s: not s.pools or not s.autoscaling.enabled,
         message="autoscaling is not supported with pools yet: set pools[].replicas"),
    Rule(cel="!has(self.pools) || self.parallelism.nodes == 1",
         check=lambda s: not s.pools or s.parallelism.nodes == 1,
         message="pools need single-node replicas (parallelism.nodes 1): a pool is a Deployment"),
    Rule(cel="!has(self.pools) || !has(self.engine.maxModelLen)",
         check=lambda s: not s.pools or s.engine.max_model_len is None,
         message="engine.maxModelLen cannot be set with pools: each pool has its own "
                 "(pools[].engine.maxModelLen, default its maxRequestTokens)"),
    Rule(cel="!has(self.pools) || has(self.routing)",
         check=lambda s: not s.pools or s.routing is not None,
         message="pools need spec.routing: the route and the pools' endpoint pickers are what send a request to "
                 "its pool (the plain Service would spread requests over every pool, long ones onto short pools)"),
    Rule(cel="!has(self.routing) || !has(self.routing.defaultPool) || "
             "(has(self.pools) && self.pools.exists(p, p.name == self.routing.defaultPool))",
         check=lambda s: s.routing is None or s.routing.default_pool is None
         or any(p.name == s.routing.default_pool for p in s.pools),
         message="routing.defaultPool must name one of spec.pools"),
]
# A transition rule, so the apiserver's alone (pydantic sees one object, never the old one): adding pools to a
# running fleet would leave its Deployment <fleet> serving beside them, and removing them would take every pool
# down before the single Deployment is up.
POOLS_SWITCH_CEL = "has(self.pools) == has(oldSelf.pools)"
POOLS_SWITCH_MESSAGE = ("spec.pools cannot be added to or removed from an existing QwenInference: create a new "
                        "one (with or without pools) and move the route to it")

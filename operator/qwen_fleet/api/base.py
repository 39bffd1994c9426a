"""The base of every API model: camelCase on the wire, frozen, unknown fields refused.

Cross-field rules are declared once (``rule``) and enforced twice: by the pydantic validator below (so
``qwen-fleet render`` refuses bad input offline) and as CEL ``x-kubernetes-validations`` in the generated CRD
(so the apiserver refuses it at ``kubectl apply``). Both layers read the same table.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BaseModel, ConfigDict, WithJsonSchema, model_validator
from pydantic.alias_generators import to_camel


@dataclass(frozen=True)
class Rule:
    """One cross-field rule: ``cel`` for the apiserver, ``check`` for Python; both mean the same."""

    cel: str
    check: Callable[[Any], bool]
    message: str
    field_path: str | None = None  # where the apiserver reports it, relative to the object the rule is on


class ApiModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=False,
        validate_default=False,
    )

    # Rules of this class, set with ``rules=[...]`` in the class statement.
    __rules__: ClassVar[tuple[Rule, ...]] = ()

    def __init_subclass__(cls, rules: tuple[Rule, ...] | list[Rule] = (), **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.__rules__ = tuple(rules)

    @model_validator(mode="after")
    def _check_rules(self) -> ApiModel:
        for rule in type(self).__rules__:
            if not rule.check(self):
                raise ValueError(rule.message)
        return self


# Kubernetes resource quantities ("8", "16Gi", "500m"): an int or a string in the CRD, as in core types.
# Unsigned: every quantity in this API is a size or a count, never negative.
QUANTITY_PATTERN = (
    r"^(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_QUANTITY_RE = re.compile(QUANTITY_PATTERN)


_MAX_QUANTITY = 2**63 - 1  # an int64, as Kubernetes stores quantities; beyond it the planner's arithmetic fails


def _is_quantity(value: str) -> bool:
    # fullmatch, not match: Python's `$` also matches before a trailing newline, Go's (the apiserver's) does
    # not. And the pattern admits what no quantity parser reads (".5E.3": a decimal exponent), which would
    # make the planner raise; the parser has the last word.
    from kubernetes.utils.quantity import parse_quantity

    if not _QUANTITY_RE.fullmatch(value):
        return False
    try:
        parse_quantity(value)
    except ValueError:
        return False
    return True


def _check_quantity(value: int | str) -> int | str:
    from kubernetes.utils.quantity import parse_quantity

    if isinstance(value, bool) or (isinstance(value, str) and not _is_quantity(value)):
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 16Gi, 500m, 8)")
    if isinstance(value, int) and value < 0:
        raise ValueError(f"{value!r} is negative; a size must be zero or more")
    if parse_quantity(value) > _MAX_QUANTITY:
        raise ValueError(f"{value!r} is too large for a Kubernetes quantity (at most {_MAX_QUANTITY})")
    return value


_INT_OR_STRING = {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}

Quantity = Annotated[
    int | str,
    AfterValidator(_check_quantity),
    WithJsonSchema({**_INT_OR_STRING, "pattern": QUANTITY_PATTERN, "minimum": 0}),
]
"""A resource quantity ("16Gi", "500m", 8), as core Kubernetes types take it."""

_PERCENT_RE = re.compile(r"^[0-9]+%$")


def _check_int_or_percent(value: int | str) -> int | str:
    if isinstance(value, bool) or (isinstance(value, str) and not _PERCENT_RE.fullmatch(value)):
        raise ValueError(f"{value!r} must be a number of pods or a percentage such as 25%")
    if isinstance(value, int) and value < 0:
        raise ValueError(f"{value!r} must not be negative")
    return value


IntOrPercent = Annotated[
    int | str,
    AfterValidator(_check_int_or_percent),
    WithJsonSchema({**_INT_OR_STRING, "pattern": r"^[0-9]+%?$", "minimum": 0}),
]
"""A pod count or a percentage ("25%"), as Deployment rollout fields take it."""


DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"

"""The base of every API model: camelCase on the wire, frozen, unknown fields refused.

Cross-field rules are declared once (``rule``) and enforced twice: by the pydantic validator below (so
``qwen-fleet render`` refuses bad input offline) and as CEL ``x-kubernetes-validations`` in the generated CRD
(so the apiserver refuses it at ``kubectl apply``). Both layers read the same table. The Python checks see
the model as CEL does: an integer field written as a whole float (64.0) is present but unreadable
(``WrittenAsFloat``), since a CEL rule that reads it fails.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, TypeGuard

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    ModelWrapValidatorHandler,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel


@dataclass(frozen=True)
class Rule:
    """One cross-field rule: ``cel`` for the apiserver, ``check`` for Python; both mean the same.

    ``check`` and ``message_for`` get the model as CEL sees it (``_CelView``): test presence with ``is None``
    before reading a value, as the CEL tests ``has()`` first, and read in the CEL's order (``cel_and``
    where a false side of ``&&`` must win over an unreadable one)."""

    cel: str
    check: Callable[[Any], bool]
    message: str
    field_path: str | None = None  # where the apiserver reports it, relative to the object the rule is on
    # A message that names the offending value: CEL for the apiserver (``messageExpression``; ``message`` is
    # its fallback) and the same text from Python. Both or neither.
    message_expression: str | None = None
    message_for: Callable[[Any], str] | None = None


class ApiModel(BaseModel):
    # strict: no coercion ("true" or 1 for a boolean, "64" for an integer), exactly as the apiserver's schema
    # check; a float field still takes a JSON integer.
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        strict=True,
        use_attribute_docstrings=False,
        validate_default=False,
    )

    # Rules of this class, set with ``rules=[...]`` in the class statement.
    __rules__: ClassVar[tuple[Rule, ...]] = ()
    # Integer fields the apiserver reads as int64 outside CEL (the scale subresource's spec.replicas): a
    # whole float there is refused whatever the rules say.
    __read_as_int64__: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, rules: tuple[Rule, ...] | list[Rule] = (), **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.__rules__ = tuple(rules)

    @model_validator(mode="wrap")
    @classmethod
    def _admit(cls, data: Any, handler: ModelWrapValidatorHandler[ApiModel]) -> ApiModel:
        model = handler(cls._as_the_apiserver_reads(data))
        # The rules run on the model as CEL reads it: `data` still holds what was written (16.0, not 16).
        seen = _CelView(model, data if isinstance(data, dict) else {}, "")
        for name in _fields_with_own_rule(cls):
            value = getattr(seen, name)
            if isinstance(value, WrittenAsFloat):
                value.refuse()  # the field's own CEL rule (a Quantity's) or the scale subresource reads it
        for rule in cls.__rules__:
            if not rule.check(seen):
                raise ValueError(rule.message_for(seen) if rule.message_for else rule.message)
        return model

    @classmethod
    def _as_the_apiserver_reads(cls, data: Any) -> Any:
        # No field of the CRD is nullable: the apiserver prunes `null` and applies the default. Do the same.
        # And a JSON number with a zero fraction (8.0) is an integer to the apiserver's schema check: take it
        # as one (a float field still takes an int); its CEL rules still see a float (see WrittenAsFloat).
        # Unknown keys stay, null or not, so that `extra="forbid"` refuses them as the apiserver does.
        if isinstance(data, dict):
            known = cls._known_keys()
            return {k: int(v) if _whole_float(v) else v for k, v in data.items() if v is not None or k not in known}
        return data

    @classmethod
    def _known_keys(cls) -> frozenset[str]:
        return frozenset(k for name, f in cls.model_fields.items() for k in (name, f.alias) if k)


@functools.cache
def _fields_with_own_rule(cls: type[ApiModel]) -> tuple[str, ...]:
    """Fields whose value the apiserver always reads: their own schema carries a CEL rule on ``self`` (a
    Quantity's), or they are in ``__read_as_int64__``."""
    return tuple(name for name, f in cls.model_fields.items()
                 if any(_has_own_rule(m) for m in f.metadata) or _has_own_rule(f.annotation)
                 or name in cls.__read_as_int64__)


def _whole_float(value: Any) -> TypeGuard[float]:
    return isinstance(value, float) and value.is_integer() and abs(value) < 2**63


def _has_own_rule(annotation: Any) -> bool:
    import typing

    if isinstance(annotation, WithJsonSchema):
        return "x-kubernetes-validations" in (annotation.json_schema or {})
    return any(_has_own_rule(arg) for arg in typing.get_args(annotation))


class WrittenAsFloat:
    """An integer field written as a whole float (``16.0``), as the apiserver's CEL sees it.

    The schema check takes 16.0 for an integer, but CEL holds it as a float64, and a rule that reads it
    fails (``invalid data, expected int, got float64 evaluating rule``), which refuses the object. A rule
    that only asks ``has()`` does not read it. So here the field is present (``is None`` is false) and any
    use of its value (compare, arithmetic, ``str``, ``bool``...) refuses, naming the fix. kubectl rewrites
    16.0 as 16; API clients that send JSON floats do not.
    """

    __slots__ = ("path", "written")

    def __init__(self, path: str, written: float) -> None:
        self.path = path
        self.written = written

    def refuse(self, *_: Any) -> Any:
        raise FloatRead(f"{self.path} is written {self.written!r}: write it as {int(self.written)} "
                        f"(the apiserver's CEL rules read {self.written!r} as a float and refuse it)")

    def __repr__(self) -> str:
        return f"WrittenAsFloat({self.path!r}, {self.written!r})"


# Every use of the value refuses; only `is None` (identity) and `repr` answer.
_OPERATORS = (
    "eq", "ne", "lt", "le", "gt", "ge", "hash", "bool", "int", "float", "index", "str", "format", "abs", "neg",
    "pos", "invert", "round", "trunc", "floor", "ceil", "add", "radd", "sub", "rsub", "mul", "rmul", "truediv",
    "rtruediv", "floordiv", "rfloordiv", "mod", "rmod", "divmod", "rdivmod", "pow", "rpow", "lshift", "rlshift",
    "rshift", "rrshift", "and", "rand", "or", "ror", "xor", "rxor", "len", "iter", "contains",
)
for _op in _OPERATORS:
    setattr(WrittenAsFloat, f"__{_op}__", WrittenAsFloat.refuse)
del _op


class FloatRead(ValueError):
    """A CEL rule read an integer field written as a whole float: the apiserver refuses the object."""


class _CelView:
    """A model as a CEL rule sees it: integer fields written as whole floats become WrittenAsFloat, nested
    models (and lists of them) are seen the same way, properties run on the view, the rest is the model's."""

    __slots__ = ("_model", "_path", "_raw")

    def __init__(self, model: ApiModel, raw: dict[str, Any], path: str) -> None:
        self._model, self._raw, self._path = model, raw, path

    def __getattr__(self, name: str) -> Any:
        model = self._model
        field = type(model).model_fields.get(name)
        if field is None:
            attr = getattr(type(model), name, None)
            return attr.fget(self) if isinstance(attr, property) and attr.fget else getattr(model, name)
        key = field.alias or name
        value = getattr(model, name)
        raw = self._raw.get(key, self._raw.get(name))
        if _whole_float(raw) and type(value) is int:  # an integer field; a float field holds a float
            return WrittenAsFloat(self._path + key, raw)
        return _seen(value, raw, self._path + key)


def _seen(value: Any, raw: Any, path: str) -> Any:
    if isinstance(value, ApiModel):
        return _CelView(value, raw if isinstance(raw, dict) else {}, path + ".")
    if isinstance(value, (list, tuple)) and isinstance(raw, list) and len(raw) == len(value):
        return type(value)(_seen(v, r, f"{path}[{i}]") for i, (v, r) in enumerate(zip(value, raw, strict=True)))
    return value


def cel_and(*terms: Callable[[], bool]) -> bool:
    """CEL's ``&&``, which is commutative over errors: a false term wins over a term that cannot be read
    (``err && false`` is false), so every term is tried before an error refuses."""
    error: FloatRead | None = None
    for term in terms:
        try:
            if not term():
                return False
        except FloatRead as err:
            error = error or err
    if error is not None:
        raise error
    return True


# Kubernetes resource quantities ("8", "16Gi", "500m"): an int or a string in the CRD, as in core types.
# Unsigned: every quantity in this API is a size or a count, never negative.
QUANTITY_PATTERN = (
    r"^(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_QUANTITY_RE = re.compile(QUANTITY_PATTERN)


_MAX_QUANTITY = 2**63 - 1  # an int64, as Kubernetes stores quantities; beyond it the planner's arithmetic fails
# The integer form's `maximum` in the CRD: 2**63 - 1 does not survive the float64 the apiserver reads
# `maximum` into (it wraps to -2**63); 9e18 is exact in float64 and below the int64 limit.
_MAX_QUANTITY_INT = 9 * 10**18
_MAX_QUANTITY_TEXT = 64


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

    if isinstance(value, bool) or (isinstance(value, str) and (len(value) > _MAX_QUANTITY_TEXT
                                                             or not _is_quantity(value))):
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 16Gi, 500m, 8)")
    if isinstance(value, int) and value < 0:
        raise ValueError(f"{value!r} is negative; a size must be zero or more")
    if isinstance(value, int) and value > _MAX_QUANTITY_INT:
        raise ValueError(f"{value!r} is too large for a Kubernetes quantity (at most {_MAX_QUANTITY_INT})")
    if parse_quantity(value) > _MAX_QUANTITY:
        raise ValueError(f"{value!r} is too large for a Kubernetes quantity (at most {_MAX_QUANTITY})")
    return value


_INT_OR_STRING = {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}

QUANTITY_MESSAGE = "must be a Kubernetes quantity such as 16Gi, 500m or 8, below 8Ei"
Quantity = Annotated[
    int | str,
    AfterValidator(_check_quantity),
    WithJsonSchema({
        **_INT_OR_STRING, "pattern": QUANTITY_PATTERN, "minimum": 0, "maximum": _MAX_QUANTITY_INT,
        "maxLength": _MAX_QUANTITY_TEXT,  # also bounds the CEL rule's cost estimate
        # The pattern admits strings no quantity parser reads (".3e4.4") and sizes beyond int64 ("1e9999");
        # Kubernetes' CEL quantity library has the last word, as the parser does on the Python side.
        "x-kubernetes-validations": [{
            "rule": "type(self) == int || (isQuantity(self) && quantity(self).isLessThan(quantity('8Ei')))",
            "message": QUANTITY_MESSAGE}],
    }),
]
"""A resource quantity ("16Gi", "500m", 8), as core Kubernetes types take it."""

# A Deployment takes a count or a percentage of at most 100 (a bare string number is refused by it).
PERCENT_PATTERN = r"^(100|[1-9]?[0-9])%$"
_PERCENT_RE = re.compile(PERCENT_PATTERN)


def _check_int_or_percent(value: int | str) -> int | str:
    if isinstance(value, bool) or (isinstance(value, str) and not _PERCENT_RE.fullmatch(value)):
        raise ValueError(f"{value!r} must be a number of pods or a percentage from 0% to 100% such as 25%")
    if isinstance(value, int) and not 0 <= value <= _MAX_PODS:
        raise ValueError(f"{value!r} must be between 0 and {_MAX_PODS}")
    return value


_MAX_PODS = 100000
IntOrPercent = Annotated[
    int | str,
    AfterValidator(_check_int_or_percent),
    WithJsonSchema({**_INT_OR_STRING, "pattern": PERCENT_PATTERN, "minimum": 0, "maximum": _MAX_PODS}),
]
"""A pod count or a percentage ("25%"), as Deployment rollout fields take it."""


# Patterns are written with explicit ASCII classes: `\s` or `\w` mean ASCII to the apiserver (Go RE2) but
# Unicode to pydantic (Rust regex), and the two layers must agree.
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
# A qualified name (label or annotation key): an optional DNS-subdomain prefix and a name.
QUALIFIED_NAME = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                  r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
# An extended resource name must carry a domain prefix (nvidia.com/gpu).
RESOURCE_NAME = (r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/"
                 r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
# A container image reference: [registry[:port]/]path[:tag][@digest].
IMAGE = (r"^[a-z0-9]+([._-]+[a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-]+[a-z0-9]+)*)*"
         r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@[a-z0-9]+([+._-][a-z0-9]+)*:[a-f0-9]{32,})?$")
# Model repo ids, revisions, served names and paths: printable ASCII without spaces or shell metacharacters.
TOKEN = r"^[A-Za-z0-9._/:@+=-]+$"


def map_keys_rule(field: str, pattern: str, what: str) -> Rule:
    """Keys of a string map (labels, annotations) checked in both layers: a structural schema cannot."""
    compiled = re.compile(pattern)
    cel_pattern = pattern.replace("\\", "\\\\")  # a CEL string literal escapes backslashes
    return Rule(
        cel=f"!has(self.{field}) || self.{field}.all(k, size(k) <= 316 && k.matches('{cel_pattern}'))",
        check=lambda obj: all(len(k) <= 316 and compiled.fullmatch(k) for k in getattr(obj, _snake(field))),
        message=f"{what} keys must be qualified names such as example.com/key (letters, digits, '-', '_', '.')",
    )


def _snake(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()


class NamedObject:
    """The name and namespace of a top-level kind, read from its ``metadata`` field (mixed into our kinds)."""

    if TYPE_CHECKING:  # the kind declares the field; an annotation here would become a field of its own, first
        metadata: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.metadata.get("name", ""))

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace") or "default")

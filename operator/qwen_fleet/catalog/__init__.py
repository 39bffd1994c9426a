"""Catalog of Qwen model facts and GPU facts: data with a source for every number, plus lookups.

Lookups are exact on a small set of spellings, never fuzzy: a wrong match would size a fleet for
the wrong model or GPU, while a miss surfaces as a clear error the operator can report.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import TypeVar

from qwen_fleet.catalog.gpus import ALL_GPUS
from qwen_fleet.catalog.qwen import ALL_MODELS
from qwen_fleet.catalog.types import GpuFacts, LinearAttentionFacts, ModelFacts

__all__ = [
    "GpuFacts",
    "LinearAttentionFacts",
    "ModelFacts",
    "all_gpus",
    "all_models",
    "find_gpu",
    "find_model",
    "gpu_lookup_keys",
    "model_lookup_keys",
]

_T = TypeVar("_T")

_QWEN_ORG = "qwen/"
_SHARED_SUFFIX = "-shared"  # GFD appends it to gpu.product when time-slicing shares the GPU
_NVIDIA_PREFIX = "nvidia-"


def _model_key(name: str) -> str:
    return name.strip().lower()


def _gpu_key(name: str) -> str:
    # NVML/DCGM spell the product with spaces ("NVIDIA H100 80GB HBM3"); GFD labels use dashes.
    key = "-".join(name.strip().lower().split())
    return key.removesuffix(_SHARED_SUFFIX)


def model_lookup_keys(model: ModelFacts) -> tuple[str, ...]:
    """Every spelling `find_model` accepts for `model`, normalised."""
    keys = [_model_key(model.name)]
    if keys[0].startswith(_QWEN_ORG):
        # Bare repo name ("Qwen3-8B") is how people and `--served-model-name` usually write it.
        keys.append(keys[0].removeprefix(_QWEN_ORG))
    keys.extend(_model_key(alias) for alias in model.aliases)
    return tuple(dict.fromkeys(keys))


def gpu_lookup_keys(gpu: GpuFacts) -> tuple[str, ...]:
    """Every spelling `find_gpu` accepts for `gpu`, normalised."""
    product = _gpu_key(gpu.product)
    keys = [product, product.removeprefix(_NVIDIA_PREFIX), _gpu_key(gpu.short_name)]
    keys.extend(_gpu_key(alias) for alias in gpu.aliases)
    return tuple(dict.fromkeys(keys))


def _index(items: Iterable[_T], keys_of: Callable[[_T], tuple[str, ...]]) -> Mapping[str, _T]:
    """Key -> item; two items claiming one spelling is a catalog bug, caught at import."""
    index: dict[str, _T] = {}
    for item in items:
        for key in keys_of(item):
            if key in index and index[key] is not item:
                raise ValueError(f"catalog lookup key {key!r} names two entries")
            index[key] = item
    return MappingProxyType(index)


_MODELS_BY_KEY = _index(ALL_MODELS, model_lookup_keys)
_GPUS_BY_KEY = _index(ALL_GPUS, gpu_lookup_keys)


def find_model(name: str) -> ModelFacts | None:
    """The model published as `name`: "Qwen/Qwen3-8B", "Qwen3-8B" or an alias, any case.

    Paths and other organisations' repos ("/models/qwen3-8b", "unsloth/Qwen3-8B") do not match:
    their weights may differ from the catalog entry, so they need an explicit alias.
    """
    return _MODELS_BY_KEY.get(_model_key(name))


def all_models() -> tuple[ModelFacts, ...]:
    """Every catalogued model, current generation first."""
    return ALL_MODELS


def find_gpu(product_or_alias: str) -> GpuFacts | None:
    """The GPU for a `nvidia.com/gpu.product` value ("NVIDIA-A10G", also "...-SHARED"), an NVML
    name ("NVIDIA H100 80GB HBM3"), a short name ("A10G", "h100") or an alias; any case."""
    return _GPUS_BY_KEY.get(_gpu_key(product_or_alias))


def all_gpus() -> tuple[GpuFacts, ...]:
    """Every catalogued GPU type."""
    return ALL_GPUS

"""What the model's tensors take inside a running vLLM engine: a worker extension the test loads into the engine.

Loaded with ``--worker-extension-cls qf_weight_probe.WeightBytesProbe`` (this directory on the engine's
PYTHONPATH) and read through vLLM's own ``POST /collective_rpc`` (``VLLM_SERVER_DEV_MODE=1``), method
``qf_weight_bytes``. vLLM's CPU model runner logs no "Model loading took ... GiB" line (the GPU runner's figure,
from its memory profiler), so the figure is read from the model itself, twice:

* ``loaded``: every parameter and persistent buffer just before ``process_weights_after_loading``, i.e. the tensors vLLM
  built for the method (its ``create_weights``: shapes and dtypes are vLLM's, not the checkpoint file's) with the
  checkpoint read into them; tensors vLLM drops while loading (GPTQ's ``g_idx``) are absent;
* ``held``: the same walk once the engine is serving, after each kernel has repacked, converted or freed what it
  does not use (CPU kernels differ from GPU ones here, see docs/capacity.md).

It also names the vLLM kernel library mapped into the worker process (``libraries``: ``_C``, ``_C_AVX512`` or
``_C_AVX2``, read from ``/proc/self/maps``), the build vLLM's CPU platform chose for this CPU.

Tensors shared by several modules (tied embeddings) count once. Runs inside vLLM's worker process: only torch and
vLLM are importable there, not qwen_fleet.
"""

from __future__ import annotations

from typing import Any

_LOADED: dict[str, Any] = {}


def _weights(model: Any) -> list[tuple[str, Any]]:
    """Parameters and persistent buffers; a non-persistent buffer (the rotary cos/sin cache) is not a weight."""
    found = []
    for prefix, module in model.named_modules():
        dot = f"{prefix}." if prefix else ""
        found += [(dot + n, t) for n, t in module._parameters.items()]
        found += [(dot + n, t) for n, t in module._buffers.items() if n not in module._non_persistent_buffers_set]
    return found


def _tensor_table(model: Any) -> dict[str, Any]:
    seen: set[tuple[int, int]] = set()
    tensors: dict[str, list[Any]] = {}
    for name, tensor in _weights(model):
        if tensor is None or tensor.is_meta:
            continue
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
        if key in seen:
            continue
        seen.add(key)
        tensors[name] = [str(tensor.dtype).removeprefix("torch."), list(tensor.shape),
                         tensor.numel() * tensor.element_size()]
    return {"bytes": sum(t[2] for t in tensors.values()), "tensors": tensors}


def _install() -> None:
    """Wrap the loader's post-processing step so the model is measured just before it."""
    from vllm.model_executor.model_loader import base_loader

    original = base_loader.process_weights_after_loading
    if getattr(original, "_qf_probe", False):
        return

    def measured(model: Any, model_config: Any, target_device: Any) -> None:
        _LOADED.update(_tensor_table(model))
        original(model, model_config, target_device)

    measured._qf_probe = True  # type: ignore[attr-defined]
    base_loader.process_weights_after_loading = measured


_install()  # imported by vLLM's worker before it loads the model (WorkerWrapperBase.init_worker)


def _kernel_libraries() -> list[str]:
    """Basenames of vLLM's native kernel libraries (``vllm/_C*.so``) mapped into this process."""
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "/vllm/_C" in line}
    return sorted(p.rsplit("/", 1)[-1].split(".", 1)[0] for p in paths)


class WeightBytesProbe:
    """Mixed into vLLM's worker class; ``qf_weight_bytes`` is callable through ``collective_rpc``."""

    def qf_weight_bytes(self) -> dict[str, Any]:
        model = self.get_model()  # type: ignore[attr-defined]  # WorkerBase.get_model
        from vllm.model_inspection import format_model_inspection

        return {"loaded": dict(_LOADED), "held": _tensor_table(model),
                "inspection": format_model_inspection(model), "libraries": _kernel_libraries()}

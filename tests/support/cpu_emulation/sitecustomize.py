"""Make the vLLM engine's torch report fewer x86 features than this CPU has, to see what vLLM does on a smaller one.

Evidence helper for tests/contract/test_quantized_engine.py, not used by default: with ``QF_TEST_ENGINE_CPU`` set
in pytest's environment, that module puts this directory on the engine's PYTHONPATH (and on its ISA probe's), so
Python imports this file at start-up in each of the engine's processes (vLLM's CPU platform spawns fresh
interpreters; they inherit the variable). ``QF_EMULATED_CPU`` names the machine:

* ``avx2``: no AVX-512 at all (an AMD EPYC of the Zen 2/3 kind): vLLM's CPU platform then loads
  ``vllm._C_AVX2`` (platforms/cpu.py ``import_kernels``);
* ``avx512``: AVX-512 without BF16 and AMX: ``vllm._C_AVX512``;
* ``avx512-bf16``: AVX-512 with BF16, no AMX tiles (an AMD EPYC of the Zen 4/5 kind): ``vllm._C``, with every
  AMX-only branch of vLLM's CPU kernels not taken.

vLLM asks torch, and only torch, for these facts (``torch.cpu._is_avx512_supported``,
``_is_avx512_bf16_supported``, ``_is_amx_tile_supported``; each call reads the ``torch.cpu`` attribute at call
time), so the three functions are replaced once ``torch.cpu`` is imported. What the native libraries pick for
themselves from CPUID is capped too, through their own variables, set here before they read them:
``ATEN_CPU_CAPABILITY`` (torch's vectorised kernels) and ``ONEDNN_MAX_CPU_ISA`` (oneDNN, under torch and under
vLLM's ``onednn_scaled_mm``). Features can only be taken away: on a CPU that lacks one, the
emulation changes nothing of it. Only this CPU's AVX-512 hardware runs the emulated builds; what an AMD core does
differently at the instruction level (timings, not results) is out of its reach.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType
from typing import Any

# machine -> (AVX-512, AVX-512 BF16, AMX tiles) as torch is to report them (False: hidden; True: left as it is)
MACHINES = {"avx2": (False, False, False), "avx512": (True, False, False), "avx512-bf16": (True, True, False)}
# machine -> the native libraries' own caps (their documented environment variables)
ENVIRONMENT = {
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "avx512": {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE"},
    "avx512-bf16": {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"},
}
VARIABLE = "QF_EMULATED_CPU"


def _restrict(cpu: ModuleType, keep: tuple[bool, bool, bool]) -> None:
    for name, kept in zip(("_is_avx512_supported", "_is_avx512_bf16_supported", "_is_amx_tile_supported"), keep,
                          strict=True):
        if not kept:
            setattr(cpu, name, lambda: False)


class _AfterTorchCpu(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the real loader of ``torch.cpu`` so the module is restricted once executed."""

    def __init__(self, keep: tuple[bool, bool, bool]) -> None:
        self.keep = keep

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch.cpu":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader, keep = spec.loader, self.keep

        class Restricted(importlib.abc.Loader):
            def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
                return loader.create_module(spec)

            def exec_module(self, module: ModuleType) -> None:
                loader.exec_module(module)
                _restrict(module, keep)

        spec.loader = Restricted()
        return spec


def _install() -> None:
    machine = os.environ.get(VARIABLE)
    if not machine:
        return
    if machine not in MACHINES:
        raise SystemExit(f"{VARIABLE}={machine!r}: expected one of {sorted(MACHINES)}")
    os.environ.update(ENVIRONMENT[machine])
    if "torch.cpu" in sys.modules:
        _restrict(sys.modules["torch.cpu"], MACHINES[machine])
    else:
        sys.meta_path.insert(0, _AfterTorchCpu(MACHINES[machine]))


_install()

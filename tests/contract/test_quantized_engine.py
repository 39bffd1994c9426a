"""The planner's weight bytes of quantized checkpoints, checked against the real vLLM CPU engine loading them.

For each quantization method vLLM 0.32's CPU build loads, a tiny random-weight Qwen3 checkpoint in that format is
written at test time (tests/support/tiny_quant.py: the on-disk layout and ``quantization_config`` real
checkpoints carry), the engine is started on it once (one engine per method, module-scoped), answers a
completion (it loads and serves), and reports the bytes of its model's tensors through a worker extension
(tests/support/engine_probe/qf_weight_probe.py; vLLM's CPU runner logs no "Model loading took" figure). The
planner's ``weight_bytes`` for the same geometry and scheme must match what the engine holds, within the bytes
the planner leaves out by design, worked out per case below from the geometry (not from the planner's code).
That the tensors hold the format (not only its shapes) is checked apart, without an engine: each checkpoint,
dequantized by the format's own libraries (vLLM's and compressed-tensors' unpacking), must come back to the
16-bit weights it was made from within that format's rounding error.

Which methods the CPU build takes, from vLLM 0.32.0's own code (site-packages/vllm/...):

* the CPU platform names none: ``CpuPlatform`` (platforms/cpu.py) keeps the base class's empty
  ``supported_quantization`` (platforms/interface.py:177), and ``verify_quantization`` (interface.py:1144-1149)
  only refuses a method when that list is non-empty; the GPU ``get_min_capability`` check is skipped because
  the CPU has no device capability (config/vllm.py:896-906). What a method needs is a CPU kernel, chosen per
  layer from model_executor/kernels/linear/__init__.py's per-platform lists:
* int4 weight-only (GPTQ sym, AWQ, compressed-tensors W4A16): ``CPUWNA16LinearKernel``
  (kernels/linear/mixed_precision/cpu.py:17-57: ``uint4`` / ``uint4b8`` only, group size even, in/out sizes
  multiples of 32), listed for ``PlatformEnum.CPU`` at kernels/linear/__init__.py:544-548. Its op depends on the
  CPU (cpu.py:168-196): with AMX tiles (and ``VLLM_CPU_INT4_W4A8``, on by default) ``int4_scaled_mm_cpu``
  (W4A8, in ``vllm._C`` only), without them
  ``cpu_gemm_wna16`` (ISA hint "vec"), which ``vllm._C`` and ``vllm._C_AVX512`` register and ``vllm._C_AVX2`` does
  not. So int4 needs AVX-512: on an AVX2-only CPU the engine loads the checkpoint, then dies at its first forward
  pass (the compile warm-up at start-up; the first request under ``--enforce-eager``, as here) with
  "AttributeError: '_OpNamespace' '_C' object has no attribute 'cpu_gemm_wna16'". Checked here: gptq, awq,
  compressed-tensors W4A16.
* int8 W8A8 (compressed-tensors): ``CPUInt8ScaledMMLinearKernel`` (kernels/linear/scaled_mm/cpu.py:33-44): with
  AMX, for weights within its size limit, the sgl int8 GEMM (``check_cpu_sgl_kernel``, layers/utils.py:439),
  otherwise oneDNN's ``onednn_scaled_mm``, which all three libraries register: any x86 CPU. Checked here.
* FP8 checkpoints (Qwen's block-128 releases): ``CPUFp8BlockScaledMMKernel`` (W8A16 through AMX BRGEMM) needs
  AMX tiles ("requires AMX tile support (Sapphire Rapids or newer).", scaled_mm/cpu.py:236-246), and so do the
  per-tensor and W8A8 CPU FP8 kernels (cpu.py:353-362, 448-460, 605-617). Served where the engine's torch reports
  AMX; elsewhere the case asserts the engine's refusal at load instead.
* MoE-only ``experts_int8`` (on the fly, routed experts only): the CPU Int8 MoE backend
  (fused_moe/oracle/int8.py:37-45) has ``CPUExpertsInt8`` for x86, which needs AMX tiles
  (fused_moe/experts/cpu_moe.py:998-1004); without a supported kernel vLLM raises "No Int8 MoE backend supports
  the deployment configuration" (oracle/int8.py:170-174) at load. Served on a tiny Qwen3-MoE where AMX is present.

Which CPU gets what. vLLM's CPU platform reads three facts from torch: ``torch.cpu._is_avx512_supported()``,
``_is_avx512_bf16_supported()``, ``_is_amx_tile_supported()``. They pick the kernel library
(platforms/cpu.py:631-662: ``vllm._C`` for AVX-512 with BF16, ``vllm._C_AVX512`` for AVX-512 without, else
``vllm._C_AVX2``) and the AMX branches above. The fixture ``engine_cpu`` asks the engine's own interpreter the same
three questions, and every case's expectation follows from the answers (``QuantCase.refusal``): served, with
its figures and the library vLLM mapped into the worker (read from /proc/self/maps by the probe), or refused in
vLLM's words (asserted, then skipped with a reason that says so). Seen with vLLM 0.32.0:

=====================  =========================  ==============================  =========================
method                 AVX-512 + BF16 + AMX       AVX-512 + BF16, no AMX          AVX2 only
                       (Xeon Sapphire Rapids+)    (EPYC Zen 4/5)                  (EPYC Zen 2/3)
=====================  =========================  ==============================  =========================
GPTQ / AWQ / W4A16     serves (W4A8 AMX kernel)   serves (cpu_gemm_wna16 "vec")   dies at first forward
W8A8 int8              serves (sgl int8 / oneDNN) serves (oneDNN)                 serves (oneDNN)
FP8 block 128          serves                     refused at load (AMX)           refused at load (AMX)
experts_int8 (MoE)     serves                     refused at load (AMX)           refused at load (AMX)
fp8 on the fly         refused at load: ``_C::static_scaled_fp8_quant`` has no CPU kernel, on all three
=====================  =========================  ==============================  =========================

The two smaller machines were seen on this AMX Xeon through tests/support/cpu_emulation/ (``QF_TEST_ENGINE_CPU=
avx2`` or ``avx512-bf16``): torch reports fewer features to the engine (and oneDNN and ATen are capped to match),
vLLM then loads the library and takes the branches such a CPU gets; the probe's library check confirms which one
ran. vLLM's own platform detection does not change on AMD: its Zen platform (platforms/__init__.py:168-214)
needs ``zentorch``, which the engine venv does not install.

Refused by the CPU build (vLLM's words):

* ``--quantization fp8`` on a 16-bit checkpoint (FP8 on the fly): vLLM quantizes each layer while loading it
  (quantization/online/fp8.py:262, ``ops.scaled_fp8_quant``), and the CPU build registers that op without a CPU
  kernel: "RuntimeError: _C::static_scaled_fp8_quant() expected at most 0 argument(s) but received 4
  argument(s). Declaration: _C::static_scaled_fp8_quant() -> ()". Started once here, to keep that true
  (``test_fp8_on_the_fly_is_refused_by_the_cpu_build``); the other refusals are read from the code, not started:

* GPTQ int8 (``Qwen/*-GPTQ-Int8``): the CPU Marlin type list holds ``uint4b8`` only
  (quantization/utils/marlin_utils.py:110-116), so ``AutoGPTQLinearMethod`` raises "Marlin does not support
  weight_bits = uint8b128. Only types = [uint4b8] are supported (for group_size = 128, device_capability = -1,
  zp = False)." (marlin_utils.py:135-142).
* NVFP4 (``modelopt_fp4``) and MXFP4 (``mxfp4``) linear layers: no kernel list has a ``PlatformEnum.CPU`` entry
  (``_POSSIBLE_NVFP4_KERNELS``, ``_POSSIBLE_MXFP4_KERNELS``, kernels/linear/__init__.py:574-621), so kernel
  selection finds none for the CPU (MXFP4 on MoE experts goes through the fused-MoE backends: not checked).
* weight-only FP8 (W8A16, ``_POSSIBLE_WFP8A16_KERNELS``): the CPU list is empty ("# To be added",
  __init__.py:514-516).

Not covered: ``moe_wna16`` and quantized MoE checkpoints (GPTQ/AWQ experts), MXFP4 experts (docs/planner.md).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from qwen_fleet.catalog import quant_schemes as S
from qwen_fleet.catalog.types import ModelFacts, QuantScheme
from qwen_fleet.plan.weights import weight_bytes
from tests.support.tiny_quant import LINEAR, make_tiny_quantized
from tests.support.tiny_qwen import TinyQwen, make_tiny_model, make_tiny_qwen3
from tests.support.vllm_server import VllmServer, with_test_compile_mode

pytestmark = pytest.mark.vllm

PROBE_DIR = Path(__file__).resolve().parents[1] / "support" / "engine_probe"
# QF_TEST_ENGINE_CPU=avx2|avx512|avx512-bf16: run the engine as on a smaller x86 CPU (tests/support/cpu_emulation/).
EMULATION_DIR = Path(__file__).resolve().parents[1] / "support" / "cpu_emulation"
EMULATED_CPU = os.environ.get("QF_TEST_ENGINE_CPU", "")
# Wide enough that the per-channel scales the planner counts as 0 stay under 1% of the quantized bytes (one fp32
# scale per output row of at least 512 inputs), small enough to load in seconds: hidden 512, MLP 1024, 4 heads and
# 2 KV heads of 128 (a width the CPU attention kernel takes), 2 layers, vocabulary 512, tied embeddings, bf16.
TINY = TinyQwen(kind="qwen3", hidden=512, intermediate=1024, heads=4, kv_heads=2, head_dim=128)
# The same attention with a mixture of 4 experts of width 512 (2 per token) in each layer, for MoE-only methods.
TINY_MOE = dataclasses.replace(TINY, kind="qwen3_moe", moe_intermediate=512)
LINEAR_LAYERS = ("(qkv_proj)", "(o_proj)", "(gate_up_proj)", "(down_proj)")  # vLLM's fused names, per layer


@dataclass(frozen=True)
class EngineCpu:
    """The x86 features vLLM's CPU platform reads from torch to pick its kernels."""

    avx512: bool
    avx512_bf16: bool
    amx: bool

    def kernel_library(self) -> str:
        """The native library vLLM 0.32 loads for these features (platforms/cpu.py ``import_kernels``, lines
        631-662): ``_C`` needs AVX-512 and AVX-512 BF16, ``_C_AVX512`` takes AVX-512 without BF16, and any other
        x86 CPU gets ``_C_AVX2``."""
        if self.avx512:
            return "_C" if self.avx512_bf16 else "_C_AVX512"
        return "_C_AVX2"


@dataclass(frozen=True)
class Refusal:
    words: str  # in the engine's log
    machine: str  # what the CPU lacks
    at_load: bool  # True: the engine dies loading the model; False: at its first forward pass


@dataclass(frozen=True)
class QuantCase:
    id: str
    fmt: str | None  # tests/support/tiny_quant.py's format; None: the 16-bit checkpoint, quantized while loading
    logged_method: str  # the quantization method vLLM settles on, as its engine config line logs it
    kernel_line: str  # vLLM's log line naming the CPU kernel it chose for the quantized layers
    scheme: QuantScheme  # the planner's scheme for such a checkpoint (catalog/quant_schemes.py)
    per_row_scale_bytes: int = 0  # bytes of one per-output-channel scale the engine keeps (planner: 0)
    per_row_cpu_bytes: int = 0  # bytes per output row a CPU kernel adds before the probe measures (not on GPUs)
    # vLLM's words on a CPU without AMX tiles, where its CPU kernel for this format refuses (None: served there)
    refusal_without_amx: str | None = None
    # vLLM's words on a CPU without AVX-512 (vllm._C_AVX2 loaded), whose library lacks the op (None: served there);
    # the engine starts and dies at its first forward pass (the first request when eager, else the compile warm-up)
    refusal_without_avx512: str | None = None
    model: TinyQwen = TINY
    argv: tuple[str, ...] = ()
    quantized_layers: tuple[str, ...] = LINEAR_LAYERS  # module names vLLM's inspection must show quantized

    def facts(self) -> ModelFacts:
        facts = self.model.facts(f"tiny-{self.id}")
        if self.model.is_moe:  # the expert width, which the planner's routed-expert count reads
            facts = dataclasses.replace(facts, moe_intermediate_size=self.model.moe_intermediate)
        if self.fmt is None:
            return facts
        return dataclasses.replace(facts, weight_quantization=self.scheme.method, quant_scheme=self.scheme)

    def refusal(self, cpu: EngineCpu) -> Refusal | None:
        """What the engine must say instead of serving on ``cpu`` (None: it must serve)."""
        if self.refusal_without_amx and not cpu.amx:  # checked first: at kernel selection, before any op runs
            return Refusal(self.refusal_without_amx, "a CPU without AMX tiles", at_load=True)
        if self.refusal_without_avx512 and not cpu.avx512:
            return Refusal(self.refusal_without_avx512, f"a CPU without AVX-512 ({cpu.kernel_library()})",
                           at_load=False)
        return None

    def planned_bytes(self) -> int:
        return weight_bytes(self.facts(), quantization=self.scheme.method if self.fmt is None else None)


NO_WNA16_OP = "'_OpNamespace' '_C' object has no attribute 'cpu_gemm_wna16'"
CASES = [
    # int4: vllm._C_AVX2 registers no cpu_gemm_wna16, the op CPUWNA16LinearKernel calls without AMX (with AMX it
    # calls int4_scaled_mm_cpu, _C only); torch's op namespace then raises at the first forward pass.
    QuantCase("gptq-int4-g128", "gptq", "auto_gptq", "Using CPUWNA16LinearKernel for AutoGPTQLinearMethod",
              S.GPTQ_INT4, refusal_without_avx512=NO_WNA16_OP),
    QuantCase("awq-int4-g128", "awq", "awq", "Using CPUWNA16LinearKernel for AutoAWQMarlinLinearMethod",
              S.AWQ_INT4, refusal_without_avx512=NO_WNA16_OP),
    QuantCase("ct-w4a16-g128", "ct-w4a16", "compressed-tensors",
              "Using CPUWNA16LinearKernel for CompressedTensorsWNA16", S.W4A16, refusal_without_avx512=NO_WNA16_OP),
    # one float32 scale per output channel (vLLM's ChannelQuantScaleParameter), counted 0 by the planner
    QuantCase("ct-w8a8-int8", "ct-w8a8-int8", "compressed-tensors",
              "Selected CPUInt8ScaledMMLinearKernel for CompressedTensorsW8A8Int8", S.W8A8_INT8,
              per_row_scale_bytes=4),
    QuantCase("fp8-block-128", "fp8-block", "fp8", "Selected CPUFp8BlockScaledMMKernel for Fp8LinearMethod",
              S.FP8_BLOCK, refusal_without_amx="requires AMX tile support"),
    # MoE-only, on the fly: the routed experts to int8 with one float32 scale per output row; attention, router and
    # embeddings stay bf16. Quantized as each layer loads, so the layer is already in the CPU kernel's format when
    # the probe measures: CPUExpertsInt8's VNNI prepack (torch.ops._C.convert_weight_packed, fused_moe/experts/
    # cpu_moe.py:1079-1084) appends 4 bytes to every row (K 512 -> 516 int8), which a GPU's Triton path does not.
    QuantCase("experts-int8-moe", None, "experts_int8", "Using CPU Int8 MoE backend", S.EXPERTS_INT8,
              per_row_scale_bytes=4, per_row_cpu_bytes=4, model=TINY_MOE, argv=("--quantization", "experts_int8"),
              quantized_layers=("(routed_experts)",),
              refusal_without_amx="No Int8 MoE backend supports the deployment configuration"),
]


def quantized_rows(case: QuantCase) -> int:
    """Output channels of the layers the format quantizes: q, k, v, o, gate, up and down of every layer, or, for a
    MoE-only method, every routed expert's gate, up (moe_intermediate each) and down (hidden)."""
    m = case.model
    if case.scheme.scope == "experts":
        return m.layers * m.experts * (2 * m.moe_intermediate + m.hidden)
    q, kv = m.heads * m.head_dim, m.kv_heads * m.head_dim
    return m.layers * (q + 2 * kv + m.hidden + 2 * m.intermediate + m.hidden)


def left_out_bytes(case: QuantCase) -> int:
    """Bytes the planner does not count, by design, for this tiny checkpoint: its norm count leaves out Qwen3's
    per-head q/k RMSNorms (2 x head_dim per layer, bf16), which it sizes with the quantized layers instead (at most
    2 bytes each off); per-channel scales (counted 0: under 0.04 bit per weight at Qwen's widths); and a few
    per-tensor scalars per linear layer (input/weight scales, 4 bytes each, at most 4 per fused layer)."""
    model = case.model
    qk_norms = 2 * model.layers * model.head_dim * 2
    scalars = model.layers * len(LINEAR) * 4 * 4
    return qk_norms + quantized_rows(case) * (case.per_row_scale_bytes + case.per_row_cpu_bytes) + scalars


ENGINE_ARGS = ["--max-model-len", "512", "--max-num-seqs", "4", "--dtype", "bfloat16",
               "--worker-extension-cls", "qf_weight_probe.WeightBytesProbe"]
ENGINE_PATH = os.pathsep.join([str(PROBE_DIR), *([str(EMULATION_DIR)] if EMULATED_CPU else [])])
EMULATION_ENV = {"QF_EMULATED_CPU": EMULATED_CPU} if EMULATED_CPU else {}
PROBE_ENV = {"VLLM_SERVER_DEV_MODE": "1", "PYTHONPATH": ENGINE_PATH, **EMULATION_ENV}


@pytest.fixture(scope="session")
def engine_cpu(vllm_python: str) -> EngineCpu:
    """What the engine's torch reports on this machine (the calls vLLM makes, asked of its own interpreter, under
    the emulation when QF_TEST_ENGINE_CPU is set), so each case's expectation follows the machine it runs on."""
    probe = ("import torch; c = torch.cpu; print(*(int(f()) for f in "
             "(c._is_avx512_supported, c._is_avx512_bf16_supported, c._is_amx_tile_supported)))")
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"} | {"PYTHONPATH": ENGINE_PATH, **EMULATION_ENV}
    out = subprocess.run([vllm_python, "-c", probe], check=True, capture_output=True, text=True, timeout=300, env=env)
    avx512, bf16, amx = (flag == "1" for flag in out.stdout.strip().splitlines()[-1].split())
    return EngineCpu(avx512=avx512, avx512_bf16=bf16, amx=amx)


@dataclass
class Served:
    case: QuantCase
    server: VllmServer
    completion: dict[str, Any]
    weights: dict[str, Any]


@pytest.fixture(scope="module", params=CASES, ids=lambda c: c.id)
def served(request: pytest.FixtureRequest, vllm_python: str, engine_cpu: EngineCpu,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    case: QuantCase = request.param
    root = tmp_path_factory.mktemp(case.id)
    if case.fmt is None:
        model_dir = make_tiny_model(root / "model", case.model, python=vllm_python)
    else:
        model_dir = make_tiny_quantized(root / "model", case.fmt, case.model, python=vllm_python)
    server = VllmServer([*ENGINE_ARGS, *case.argv], PROBE_ENV, model_dir, python=vllm_python,
                        log_path=root / "vllm.log", uniproc=True)
    refusal = case.refusal(engine_cpu)
    if refusal is not None:
        # This CPU lacks what the format's CPU kernel needs: the engine must not serve it, in vLLM's words.
        if refusal.at_load or "--enforce-eager" not in with_test_compile_mode(server.argv()):
            with pytest.raises(RuntimeError, match="exited"):
                server.start()
        else:  # eager, the engine runs no forward pass before the first request: that request must fail
            with server:
                status, body = server.post_json("/v1/completions", {
                    "model": server.served_model_name, "prompt": "alpha", "max_tokens": 1})
                assert status == 500, (body, server.tail())
        assert refusal.words in server.log(), server.tail()
        pytest.skip(f"{case.id}: refused on {refusal.machine}, in vLLM's words {refusal.words!r} (checked)")
    with server:
        status, completion = server.post_json("/v1/completions", {
            "model": server.served_model_name, "prompt": "alpha beta gamma", "max_tokens": 8, "temperature": 0})
        assert status == 200, (completion, server.tail())
        status, body = server.post_json("/collective_rpc", {"method": "qf_weight_bytes"})
        assert status == 200, (body, server.tail())
        yield Served(case, server, completion, body["results"][0])


def _overrides(spec: TinyQwen) -> dict[str, Any]:
    return {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec) if f.name != "kind"}


def test_the_engine_loads_the_checkpoint_and_serves(served: Served) -> None:
    assert served.completion["usage"]["completion_tokens"] >= 1
    log = served.server.log()
    assert f"quantization={served.case.logged_method}," in log, served.server.tail()
    assert served.case.kernel_line in log, served.server.tail()


def test_the_engine_runs_the_kernel_library_built_for_this_cpu(served: Served, engine_cpu: EngineCpu) -> None:
    # The build vLLM picked, as mapped into its worker process: the figures below are that library's.
    assert served.weights["libraries"] == [engine_cpu.kernel_library()], served.weights["libraries"]


def test_every_linear_layer_runs_a_quantized_kernel(served: Served) -> None:
    # vLLM's own model inspection names each layer's quant method: none of the layers the format quantizes may
    # have fallen back to the unquantized path (the inspection omits "quant=" for those; identical layers are
    # listed once).
    layers = served.case.quantized_layers
    lines = [ln for ln in served.weights["inspection"].splitlines() if any(p in ln for p in layers)]
    assert len(lines) == len(layers), served.weights["inspection"]
    assert all("quant=" in ln for ln in lines), "\n".join(lines)


def test_planned_weight_bytes_match_what_the_engine_holds(served: Served) -> None:
    # Compared with the tensors vLLM loads the checkpoint into (its create_weights layout, the same code on GPUs),
    # not with what the CPU kernels then repack them into ("held": e.g. the AMX int4 path keeps int8 blocks and
    # float32 scales, about 8% more), which is this CPU's, not a GPU's (docs/capacity.md).
    case = served.case
    planned = case.planned_bytes()
    loaded, held = served.weights["loaded"]["bytes"], served.weights["held"]["bytes"]
    allowed = left_out_bytes(case)
    print(f"\n{case.id}: planner {planned:,} B, engine loaded {loaded:,} B ({planned - loaded:+,} B), "
          f"held after the CPU kernels' repacking {held:,} B; allowed difference {allowed:,} B "
          f"({allowed / loaded:.2%})")
    assert abs(planned - loaded) <= allowed, _table(served.weights["loaded"])


# Relative error of a round-to-nearest quantization of Gaussian weights: int4 with 16 levels per group ~0.10-0.12,
# int8 per channel ~0.008, FP8 E4M3 (3 mantissa bits) ~0.027. A misread layout (nibble order, packing dimension,
# zero points, scale shape) decorrelates the weights: an error near 1 or more.
DEQUANT_BOUND = {"gptq": 0.15, "awq": 0.15, "ct-w4a16": 0.15, "ct-w8a8-int8": 0.02, "fp8-block": 0.05}


@pytest.fixture(scope="module")
def dequant_errors(vllm_python: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, float]]:
    """Each format's tiny checkpoint dequantized by the format's own libraries (tests/support/tiny_quant_check.py)
    and compared with the 16-bit model it was made from (same geometry and seed)."""
    root = tmp_path_factory.mktemp("dequant")
    source = make_tiny_qwen3(root / "bf16", python=vllm_python, **_overrides(TINY))
    pairs = [f"{fmt}={make_tiny_quantized(root / fmt, fmt, TINY, python=vllm_python)}" for fmt in DEQUANT_BOUND]
    script = Path(__file__).resolve().parents[1] / "support" / "tiny_quant_check.py"
    done = subprocess.run([vllm_python, str(script), str(source), *pairs], capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    errors: dict[str, dict[str, float]] = json.loads(done.stdout.strip().splitlines()[-1])
    return errors


@pytest.mark.parametrize("fmt", sorted(DEQUANT_BOUND))
def test_the_tiny_checkpoint_dequantizes_to_its_source(fmt: str, dequant_errors: dict[str, dict[str, float]]) -> None:
    errors = dequant_errors[fmt]
    assert len(errors) == TINY.layers * len(LINEAR), sorted(errors)  # every linear layer was quantized
    assert max(errors.values()) < DEQUANT_BOUND[fmt], errors


def test_fp8_on_the_fly_is_refused_by_the_cpu_build(vllm_python: str, tmp_path: Path) -> None:
    # --quantization fp8 on a 16-bit checkpoint (the planner's advice when no FP8 checkpoint is published) quantizes
    # each layer as it loads (quantization/online/fp8.py:262, ops.scaled_fp8_quant); vLLM 0.32's CPU build
    # registers that op without a CPU kernel, so the engine dies at load. GPUs have the kernel; the planner's
    # sizing of it (1 byte per linear weight) is checked by hand in tests/unit/test_quantization.py only.
    model_dir = make_tiny_qwen3(tmp_path / "model", python=vllm_python, **_overrides(TINY))
    server = VllmServer([*ENGINE_ARGS, "--quantization", "fp8"], PROBE_ENV, model_dir, python=vllm_python,
                        log_path=tmp_path / "vllm.log", uniproc=True)
    with pytest.raises(RuntimeError, match="exited"):
        server.start()
    assert "_C::static_scaled_fp8_quant() expected at most 0 argument(s)" in server.log(), server.tail()


def _table(measured: dict[str, Any]) -> str:
    rows = sorted(measured["tensors"].items(), key=lambda kv: -kv[1][2])
    return "\n".join(f"{name}: {dtype} {shape} {size:,} B" for name, (dtype, shape, size) in rows)

"""Consistency checks on the model and GPU catalog; each one fails if an entry is mistyped."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from qwen_fleet.catalog import (
    GpuFacts,
    ModelFacts,
    all_gpus,
    all_models,
    find_gpu,
    find_model,
    gpu_lookup_keys,
    model_lookup_keys,
)
from qwen_fleet.catalog.quant_schemes import AWQ_INT4
from qwen_fleet.catalog.qwen import QUANTIZATION_METHODS, quantized_variant

DOCS = Path(__file__).resolve().parents[2] / "docs" / "catalog.md"
MODELS = all_models()
GPUS = all_gpus()
HYBRID = [m for m in MODELS if m.is_hybrid]
STANDARD = [m for m in MODELS if not m.is_hybrid]
# Fields that define the network; a repo sharing them with another shares its KV/state geometry.
ARCH_FIELDS = (
    "num_layers",
    "full_attention_layers",
    "full_attention_interval",
    "num_attention_heads",
    "num_kv_heads",
    "head_dim",
    "hidden_size",
    "vocab_size",
    "linear_attention",
    "num_experts",
    "experts_per_token",
    "tie_word_embeddings",
    "params_billion",
    "active_params_billion",
)


def _ids(items: list[ModelFacts] | tuple[ModelFacts, ...]) -> list[str]:
    return [m.name for m in items]


# --- models -------------------------------------------------------------------------------------


def test_model_names_are_unique() -> None:
    names = [m.name.lower() for m in MODELS]
    assert len(names) == len(set(names))


def test_lookup_keys_never_collide() -> None:
    keys = [key for m in MODELS for key in model_lookup_keys(m)]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize("model", MODELS, ids=_ids(MODELS))
def test_every_model_cites_a_url(model: ModelFacts) -> None:
    assert any(s.startswith("https://") for s in model.sources)
    assert all(s.startswith("https://") for s in model.sources)


@pytest.mark.parametrize("model", MODELS, ids=_ids(MODELS))
def test_layers_split_into_full_and_linear(model: ModelFacts) -> None:
    assert model.full_attention_layers + model.linear_attention_layers == model.num_layers
    assert 0 < model.full_attention_layers <= model.num_layers


@pytest.mark.parametrize("model", HYBRID, ids=_ids(HYBRID))
def test_hybrid_full_layers_follow_the_interval(model: ModelFacts) -> None:
    assert model.full_attention_interval is not None
    assert model.num_layers % model.full_attention_interval == 0
    assert model.full_attention_layers == model.num_layers // model.full_attention_interval
    assert model.linear_attention_layers == model.full_attention_layers * (model.full_attention_interval - 1)


@pytest.mark.parametrize("model", STANDARD, ids=_ids(STANDARD))
def test_standard_models_have_full_attention_everywhere(model: ModelFacts) -> None:
    assert model.full_attention_layers == model.num_layers
    assert model.full_attention_interval is None
    assert model.linear_attention is None


def test_hybrid_families_are_exactly_qwen35_qwen36_and_qwen3_next() -> None:
    assert {m.family for m in HYBRID} == {"qwen3.5", "qwen3.6", "qwen3-next"}
    assert all(m.family in {"qwen3", "qwen3-vl", "qwen2.5", "qwen1"} for m in STANDARD)


@pytest.mark.parametrize("model", MODELS, ids=_ids(MODELS))
def test_heads_group_evenly(model: ModelFacts) -> None:
    assert model.num_kv_heads <= model.num_attention_heads
    assert model.num_attention_heads % model.num_kv_heads == 0


@pytest.mark.parametrize("model", HYBRID, ids=_ids(HYBRID))
def test_linear_value_heads_group_over_key_heads(model: ModelFacts) -> None:
    gdn = model.linear_attention
    assert gdn is not None
    assert gdn.num_value_heads % gdn.num_key_heads == 0
    assert gdn.conv_kernel_size > 0


@pytest.mark.parametrize("model", MODELS, ids=_ids(MODELS))
def test_head_dim_matches_the_family(model: ModelFacts) -> None:
    if model.family in ("qwen2.5", "qwen1"):
        # Qwen2 configs carry no head_dim; transformers derives it as hidden / heads.
        assert model.head_dim * model.num_attention_heads == model.hidden_size
    elif model.family in ("qwen3", "qwen3-vl"):
        assert model.head_dim == 128
    else:
        assert model.head_dim == 256


@pytest.mark.parametrize("model", MODELS, ids=_ids(MODELS))
def test_moe_fields_come_together(model: ModelFacts) -> None:
    moe_fields = (model.num_experts, model.experts_per_token, model.active_params_billion)
    if model.is_moe:
        assert model.num_experts is not None
        assert model.experts_per_token is not None
        assert model.active_params_billion is not None
        assert model.experts_per_token < model.num_experts
        assert model.active_params_billion < model.params_billion
    else:
        assert moe_fields == (None, None, None)


@pytest.mark.parametrize("model", MODELS, ids=_ids(MODELS))
def test_checkpoint_count_is_not_below_the_card(model: ModelFacts) -> None:
    # The cards round and count the language model only; the safetensors index adds the rest.
    if model.checkpoint_params_billion is not None:
        assert model.checkpoint_params_billion >= model.params_billion


@pytest.mark.parametrize("model", MODELS, ids=_ids(MODELS))
def test_unverified_fields_name_real_fields(model: ModelFacts) -> None:
    names = {f.name for f in dataclasses.fields(ModelFacts)}
    assert set(model.unverified_fields) <= names


@pytest.mark.parametrize("model", MODELS, ids=_ids(MODELS))
def test_native_context_is_a_known_window(model: ModelFacts) -> None:
    assert model.native_context in {8192, 32768, 40960, 262144}  # 8192: Qwen1


def test_qwen3_2507_releases_keep_their_base_architecture() -> None:
    releases = [m for m in MODELS if m.name.endswith("-2507")]
    assert len(releases) == 6  # Instruct and Thinking
    for release in releases:
        assert release.base_model is not None
        base = find_model(release.base_model)
        assert base is not None
        assert release.native_context == 262144 > base.native_context
        for name in ARCH_FIELDS:
            assert getattr(release, name) == getattr(base, name), (release.name, name)


def test_quantized_variants_inherit_the_base_architecture() -> None:
    quantized = [m for m in MODELS if m.weight_quantization is not None]
    assert {m.name for m in quantized} >= {
        "Qwen/Qwen2.5-7B-Instruct-AWQ",
        "Qwen/Qwen3-4B-AWQ",
        "Qwen/Qwen3-8B-FP8",
    }
    for variant in quantized:
        assert variant.weight_quantization in QUANTIZATION_METHODS
        assert variant.base_model is not None
        base = find_model(variant.base_model)
        assert base is not None
        assert base.weight_quantization is None
        for name in (*ARCH_FIELDS, "native_context", "family"):
            assert getattr(variant, name) == getattr(base, name), (variant.name, name)


def test_awq_variants_run_in_float16() -> None:
    for model in MODELS:
        if model.weight_quantization == "awq":
            assert model.dtype == "float16", model.name


def test_quantized_variant_rejects_an_unknown_method() -> None:
    base = find_model("Qwen/Qwen3-8B")
    assert base is not None
    with pytest.raises(ValueError, match="unknown quantization method"):
        quantized_variant(base, "Qwen/Qwen3-8B-Int3", method="int3", dtype="bfloat16", scheme=AWQ_INT4)
    with pytest.raises(ValueError, match="not gptq"):
        quantized_variant(base, "Qwen/Qwen3-8B-GPTQ", method="gptq", dtype="float16", scheme=AWQ_INT4)


def test_every_quantized_checkpoint_carries_its_scheme() -> None:
    quantized = [m for m in MODELS if m.weight_quantization]
    assert len(quantized) >= 19
    for model in quantized:
        assert model.quant_scheme is not None and model.quant_scheme.method == model.weight_quantization, model.name
        assert model.base_model is not None and find_model(model.base_model) is not None, model.name


def test_facts_are_frozen() -> None:
    model = find_model("Qwen/Qwen3-8B")
    assert model is not None
    with pytest.raises(dataclasses.FrozenInstanceError):
        model.num_layers = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("name", "bytes_per_token"),
    [
        # FACTS.md: 2 (K,V) x 28 layers x 4 KV heads x 128 x 2 B at 16-bit.
        ("Qwen/Qwen2.5-7B-Instruct", 57_344),
        # Hybrid: only the 16 full-attention layers hold KV; the 48 DeltaNet layers hold none.
        ("Qwen/Qwen3.5-27B", 2 * 16 * 4 * 256 * 2),
        ("Qwen/Qwen3.6-35B-A3B", 2 * 10 * 2 * 256 * 2),
        ("Qwen/Qwen3-8B", 2 * 36 * 8 * 128 * 2),
    ],
)
def test_kv_bytes_per_token_pins(name: str, bytes_per_token: int) -> None:
    model = find_model(name)
    assert model is not None
    kv = 2 * model.full_attention_layers * model.num_kv_heads * model.head_dim * 2
    assert kv == bytes_per_token


# --- model lookup -------------------------------------------------------------------------------


@pytest.mark.parametrize("model", MODELS, ids=_ids(MODELS))
def test_every_model_finds_itself(model: ModelFacts) -> None:
    assert find_model(model.name) is model
    assert find_model(model.name.upper()) is model
    assert find_model(f"  {model.name}  ") is model
    assert find_model(model.name.split("/", 1)[1]) is model
    for alias in model.aliases:
        assert find_model(alias) is model
        assert find_model(alias.lower()) is model


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("Qwen/Qwen3-4B-Instruct-2507", "Qwen/Qwen3-4B-Instruct-2507"),
        ("Qwen3-4B-Instruct-2507", "Qwen/Qwen3-4B-Instruct-2507"),
        ("qwen3-4b-instruct-2507", "Qwen/Qwen3-4B-Instruct-2507"),
        ("qwen3-4b-2507", "Qwen/Qwen3-4B-Instruct-2507"),
        ("QWEN/QWEN2.5-7B-INSTRUCT-AWQ", "Qwen/Qwen2.5-7B-Instruct-AWQ"),
    ],
)
def test_find_model_spellings(query: str, expected: str) -> None:
    found = find_model(query)
    assert found is not None
    assert found.name == expected


@pytest.mark.parametrize(
    "query",
    ["/models/qwen3-4b", "/models/Qwen3-8B", "unsloth/Qwen3-8B", "Qwen3-9000B", "", "qwen/", "Qwen"],
)
def test_find_model_rejects_paths_and_strangers(query: str) -> None:
    assert find_model(query) is None


# --- GPUs ---------------------------------------------------------------------------------------


def _gpu_ids(items: tuple[GpuFacts, ...]) -> list[str]:
    return [g.product for g in items]


def test_gpu_products_are_unique() -> None:
    products = [g.product.lower() for g in GPUS]
    assert len(products) == len(set(products))
    keys = [key for g in GPUS for key in gpu_lookup_keys(g)]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize("gpu", GPUS, ids=_gpu_ids(GPUS))
def test_gpu_product_has_the_gfd_label_shape(gpu: GpuFacts) -> None:
    # GFD: NVML name with spaces replaced by "-"; Kubernetes label values allow no spaces. NVML names
    # the Turing data-centre parts "Tesla ..." (Tesla-T4), everything later "NVIDIA ...".
    assert gpu.product.startswith(("NVIDIA-", "Tesla-"))
    assert " " not in gpu.product
    assert len(gpu.product) <= 63


@pytest.mark.parametrize("gpu", GPUS, ids=_gpu_ids(GPUS))
def test_gpu_memory_is_the_label_in_gib(gpu: GpuFacts) -> None:
    assert gpu.memory_mib is not None
    assert gpu.memory_gib * 1024 == pytest.approx(gpu.memory_mib)
    assert 14 < gpu.memory_gib < 180  # T4 to B200; the driver never reports the marketing GB figure


@pytest.mark.parametrize("gpu", GPUS, ids=_gpu_ids(GPUS))
def test_fp8_agrees_with_compute_capability(gpu: GpuFacts) -> None:
    assert gpu.compute_capability is not None
    assert gpu.fp8 == (gpu.compute_capability >= (8, 9))


@pytest.mark.parametrize("gpu", GPUS, ids=_gpu_ids(GPUS))
def test_gpu_interconnect_is_described_consistently(gpu: GpuFacts) -> None:
    assert gpu.interconnect_gb_s is not None
    assert ("NVLink" in gpu.interconnect) or not gpu.nvlink
    if gpu.nvlink:
        assert gpu.interconnect_gb_s >= 600
    else:
        assert gpu.interconnect_gb_s <= 128
    assert any(s.startswith("https://") for s in gpu.sources)


@pytest.mark.parametrize(
    ("product", "mib"),
    [
        ("NVIDIA-A10G", 23028),
        ("NVIDIA-L4", 23034),
        ("NVIDIA-L40S", 46068),
        ("NVIDIA-H100-80GB-HBM3", 81559),
        ("NVIDIA-H100-NVL", 95830),
        ("NVIDIA-H200", 143771),
        ("Tesla-T4", 15109),
        ("NVIDIA-GeForce-RTX-4090", 24564),
        ("NVIDIA-L20", 46068),
        ("NVIDIA-H20", 97871),
        ("NVIDIA-B200", 183359),
    ],
)
def test_gpu_memory_pins(product: str, mib: int) -> None:
    gpu = find_gpu(product)
    assert gpu is not None
    assert gpu.memory_mib == mib


@pytest.mark.parametrize(
    ("query", "product"),
    [
        ("NVIDIA-A10G", "NVIDIA-A10G"),
        ("A10G", "NVIDIA-A10G"),
        ("a10g", "NVIDIA-A10G"),
        ("NVIDIA-A10G-SHARED", "NVIDIA-A10G"),
        ("NVIDIA A10G", "NVIDIA-A10G"),
        ("H100", "NVIDIA-H100-80GB-HBM3"),
        ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
        ("h100-pcie", "NVIDIA-H100-PCIe"),
        ("H100-NVL", "NVIDIA-H100-NVL"),
        ("l4", "NVIDIA-L4"),
        ("L40S", "NVIDIA-L40S"),
        ("A100-80GB", "NVIDIA-A100-SXM4-80GB"),
        ("A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB"),
        ("nvidia-h200", "NVIDIA-H200"),
        ("H200", "NVIDIA-H200"),
    ],
)
def test_find_gpu_spellings(query: str, product: str) -> None:
    found = find_gpu(query)
    assert found is not None
    assert found.product == product


@pytest.mark.parametrize("query", ["A100", "L40", "V100", "", "NVIDIA", "NVIDIA-H100"])
def test_find_gpu_refuses_to_guess(query: str) -> None:
    assert find_gpu(query) is None


@pytest.mark.parametrize("gpu", GPUS, ids=_gpu_ids(GPUS))
def test_every_gpu_finds_itself(gpu: GpuFacts) -> None:
    assert find_gpu(gpu.product) is gpu
    assert find_gpu(gpu.short_name) is gpu
    for alias in gpu.aliases:
        assert find_gpu(alias) is gpu


# --- docs ---------------------------------------------------------------------------------------


def test_docs_list_every_entry_and_every_unverified_field() -> None:
    text = DOCS.read_text(encoding="utf-8")
    for model in MODELS:
        assert f"`{model.name}`" in text, model.name
        for name in model.unverified_fields:
            assert f"`{model.name}`: `{name}`" in text, (model.name, name)
    for gpu in GPUS:
        assert f"`{gpu.product}`" in text, gpu.product


def test_hybrid_full_attention_layers_follow_the_interval() -> None:
    for model in HYBRID:
        assert model.full_attention_interval is not None
        assert model.full_attention_layers * model.full_attention_interval == model.num_layers, model.name


def test_multimodal_checkpoints_hold_their_vision_encoder() -> None:
    # Qwen3-VL-8B: the published checkpoint (8.77B) less Qwen3-8B's language model (8.19B) is the encoder the
    # catalog computes from vision_config (0.576B), within the checkpoint figure's rounding.
    vl = find_model("Qwen/Qwen3-VL-8B-Instruct")
    assert vl is not None and vl.vision_params_billion is not None and vl.checkpoint_params_billion is not None
    assert abs(vl.checkpoint_params_billion - 8.19 - vl.vision_params_billion) < 0.01


def test_qwen1_is_catalogued_but_refused_with_the_replacement() -> None:
    qwen1 = find_model("Qwen/Qwen-7B")
    assert qwen1 is not None and qwen1.engine_unsupported is not None
    assert "Qwen/Qwen2.5-7B-Instruct" in qwen1.engine_unsupported


def test_values_read_since_from_launch_configs() -> None:
    """Values verified from NVIDIA Megatron-LM's and THUDM slime's configs (docs/catalog.md, "Verified since")."""
    big, a3b = find_model("Qwen/Qwen3.5-397B-A17B"), find_model("Qwen/Qwen3.6-35B-A3B")
    assert big is not None and a3b is not None
    assert (big.moe_intermediate_size, big.shared_expert_intermediate_size) == (1024, 1024)
    assert (a3b.moe_intermediate_size, a3b.shared_expert_intermediate_size) == (512, 512)
    assert big.unverified_fields == () and a3b.unverified_fields == ()


def test_qwen3_vl_30b_checkpoint_count_from_a_tensor_census() -> None:
    """joshuahickscorp/hawking's census of the checkpoint: 31,070,754,032 parameters (docs/catalog.md)."""
    vl = find_model("Qwen/Qwen3-VL-30B-A3B-Instruct")
    assert vl is not None and vl.checkpoint_params_billion == 31.07 and vl.unverified_fields == ()


def test_qwen3_8b_fp8_runs_in_bfloat16() -> None:
    """vLLM with dtype auto resolved torch.bfloat16 for Qwen/Qwen3-8B-FP8 (ROCm/ROCm#5567, docs/catalog.md)."""
    fp8 = find_model("Qwen/Qwen3-8B-FP8")
    assert fp8 is not None and (fp8.dtype, fp8.weight_quantization, fp8.unverified_fields) == ("bfloat16", "fp8", ())


def test_qwen3_235b_2507_fp8_dtype_is_its_configs() -> None:
    """The repo's config.json, vendored by oracle/accelerated-data-science: torch_dtype bfloat16 (docs/catalog.md)."""
    fp8 = find_model("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8")
    assert fp8 is not None
    assert (fp8.dtype, fp8.weight_quantization, fp8.unverified_fields) == ("bfloat16", "fp8", ())
    assert any("oracle/accelerated-data-science" in source for source in fp8.sources)


def test_no_catalog_value_is_left_unverified() -> None:
    """Every value has a source now; a new unverified one must be listed in docs/catalog.md (test above)."""
    assert [(m.name, m.unverified_fields) for m in MODELS if m.unverified_fields] == []


def test_qwen36_27b_mlp_width_read_from_a_parsed_config() -> None:
    """ohdearquant/lattice's Qwen3.6-27B preset and its test on the downloaded config.json: intermediate_size 17408
    (docs/catalog.md, "Verified since")."""
    dense = find_model("Qwen/Qwen3.6-27B")
    assert dense is not None and dense.intermediate_size == 17408 and dense.unverified_fields == ()


def test_values_read_from_config_copies() -> None:
    """Values read from vendored config.json copies (docs/catalog.md, "Verified since", issue 19's catalog pass)."""
    expected = {  # name: (vocab_size, tie_word_embeddings, dtype, native_context)
        "Qwen/Qwen3-Reranker-0.6B": (151669, True, "bfloat16", 40960),
        "Qwen/Qwen3-Embedding-0.6B": (151669, True, "bfloat16", 32768),
        "Qwen/Qwen3-Embedding-4B": (151665, True, "bfloat16", 40960),
        "Qwen/Qwen3-Embedding-8B": (151665, False, "bfloat16", 40960),
        "Qwen/Qwen3-Coder-30B-A3B-Instruct": (151936, False, "bfloat16", 262144),
        "Qwen/Qwen3.5-9B": (248320, False, "bfloat16", 262144),
        "Qwen/Qwen-7B": (151936, False, "bfloat16", 8192),
    }
    for name, values in expected.items():
        model = find_model(name)
        assert model is not None, name
        assert (model.vocab_size, model.tie_word_embeddings, model.dtype, model.native_context) == values, name
        assert model.unverified_fields == (), name
    big = find_model("Qwen/Qwen3.5-122B-A10B")
    assert big is not None and big.linear_attention is not None
    assert big.linear_attention.conv_kernel_size == 4 and big.unverified_fields == ()

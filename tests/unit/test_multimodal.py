"""Multimodal Qwen: media limits per prompt, language-model-only serving, and the vision encoder's memory."""

from __future__ import annotations

import json
from typing import Any

from qwen_fleet.api import QwenInference
from qwen_fleet.catalog import find_model
from qwen_fleet.catalog.vision import qwen3_vision_params_billion
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.plan.capacity import CapacityInput, plan_capacity, weight_bytes
from qwen_fleet.render.engine_args import engine_args

H100 = "NVIDIA-H100-80GB-HBM3"


def plan_of(model: str, multimodal: dict[str, Any] | None = None, **spec: Any) -> tuple[QwenInference, Any]:
    body: dict[str, Any] = {"model": {"name": model}, "gpu": {"product": H100}, **spec}
    if multimodal is not None:
        body["serving"] = {"multimodal": multimodal}
    cr = QwenInference.model_validate({"metadata": {"name": "q", "namespace": "ns"}, "spec": body})
    return cr, make_plan(cr, OperatorConfig())


def value(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def test_the_qwen35_vision_encoder_is_counted_from_its_config() -> None:
    # vision_config of Qwen3.5/3.6: depth 27, hidden 1152, MLP 4304, no DeepStack mergers. Worked by hand:
    # block = 2 LayerNorms 4,608 + qkv 3,981,312 + 3,456 + proj 1,327,104 + 1,152 + fc1 4,958,208 + 4,304
    #         + fc2 4,958,208 + 1,152 = 15,239,504; x 27 = 411,466,608
    # patch embedding 1536 x 1152 + 1152 = 1,770,624; positions 2304 x 1152 = 2,654,208
    # merger into 5120: norm 2,304 + 4608 x 4608 + 4,608 + 4608 x 5120 + 5,120 = 44,838,656
    assert qwen3_vision_params_billion(out_hidden=5120, deepstack=0) == round(460_730_096 / 1e9, 3) == 0.461
    # into 4096 the merger's last layer is 4608 x 4096 + 4096: 40,117,040, total 456,008,480
    assert qwen3_vision_params_billion(out_hidden=4096, deepstack=0) == 0.456
    for name, billions in [("Qwen/Qwen3.5-9B", 0.456), ("Qwen/Qwen3.6-27B", 0.461), ("Qwen/Qwen3.5-27B", 0.461),
                           ("Qwen/Qwen3.5-35B-A3B", 0.447), ("Qwen/Qwen3.6-35B-A3B", 0.447),
                           ("Qwen/Qwen3.5-122B-A10B", 0.451), ("Qwen/Qwen3.5-397B-A17B", 0.456)]:
        model = find_model(name)
        assert model is not None and model.vision_params_billion == billions, name


def test_a_card_count_gains_the_encoder_and_a_checkpoint_count_already_holds_it() -> None:
    card, checkpoint = find_model("Qwen/Qwen3.5-27B"), find_model("Qwen/Qwen3.6-27B")
    assert card is not None and checkpoint is not None
    # Qwen3.5-27B: card 27.0B (language model) + 0.461B encoder, bf16.
    assert weight_bytes(card) == 54_922_000_000
    assert weight_bytes(card, vision_encoder=False) == 54_000_000_000
    # Qwen3.6-27B: checkpoint 27.781B, encoder included.
    assert weight_bytes(checkpoint) == 55_562_000_000
    assert weight_bytes(checkpoint, vision_encoder=False) == 54_640_000_000


def test_language_model_only_gives_the_encoder_to_the_kv_cache() -> None:
    cr, plan = plan_of("Qwen/Qwen3.6-27B", {"languageModelOnly": True})
    _, full = plan_of("Qwen/Qwen3.6-27B")
    assert plan.feasible and full.feasible
    args = engine_args(cr, plan)
    assert "--language-model-only" in args and "--limit-mm-per-prompt" not in args
    # 0.461B parameters x 2 bytes = 922,000,000 bytes = 0.86 GiB, from the weights to the KV cache.
    gib = 1024**3
    assert round(full.capacity.weights_gi_b_per_gpu - plan.capacity.weights_gi_b_per_gpu, 2) == round(922e6 / gib, 2)
    assert plan.capacity.weights_gi_b_per_gpu == round(54_640_000_000 / gib, 2) == 50.89
    assert full.capacity.weights_gi_b_per_gpu == round(55_562_000_000 / gib, 2) == 51.75
    model = find_model("Qwen/Qwen3.6-27B")
    assert model is not None
    without, with_encoder = (plan_capacity(CapacityInput(model=model, gpu_memory_gib=79.65, vision_encoder=v))
                             for v in (False, True))
    assert without.kv_cache_bytes_per_gpu - with_encoder.kv_cache_bytes_per_gpu == 922_000_000
    assert plan.capacity.vision_encoder_gi_b_per_gpu == full.capacity.vision_encoder_gi_b_per_gpu == 0.86
    assert plan.serving.status().language_model_only is True
    assert full.serving.status().language_model_only is None


def test_the_encoder_is_sharded_over_the_tensor_ranks() -> None:
    _, plan = plan_of("Qwen/Qwen3.6-27B", {"languageModelOnly": True}, parallelism={"tensor": 2})
    assert plan.capacity.vision_encoder_gi_b_per_gpu == round(461_000_000 / 1024**3, 2) == 0.43


def test_media_limits_render_as_vllm_json_and_only_both_zero_drop_the_encoder() -> None:
    cr, plan = plan_of("Qwen/Qwen3-VL-8B-Instruct", {"limitsPerPrompt": {"image": 4, "video": 1}})
    assert json.loads(value(engine_args(cr, plan), "--limit-mm-per-prompt") or "") == {"image": 4, "video": 1}
    loaded = plan.capacity.weights_gi_b_per_gpu
    # Qwen3-VL-8B: checkpoint 8.77B x 2 bytes.
    assert loaded == round(17_540_000_000 / 1024**3, 2)
    # image 0 alone: video keeps vLLM's 999, so the encoder is still built.
    cr, plan = plan_of("Qwen/Qwen3-VL-8B-Instruct", {"limitsPerPrompt": {"image": 0}})
    assert value(engine_args(cr, plan), "--limit-mm-per-prompt") == '{"image":0}'
    assert plan.capacity.weights_gi_b_per_gpu == loaded
    # Both 0: vLLM builds no encoder; 8.77B - 0.576B = 8.194B x 2 bytes.
    cr, plan = plan_of("Qwen/Qwen3-VL-8B-Instruct", {"limitsPerPrompt": {"image": 0, "video": 0}})
    assert "--language-model-only" not in engine_args(cr, plan)
    assert plan.capacity.weights_gi_b_per_gpu == round(16_388_000_000 / 1024**3, 2)
    status = plan.serving.status().model_dump(by_alias=True, exclude_none=True)
    assert status["languageModelOnly"] is True and status["limitsPerPrompt"] == {"image": 0, "video": 0}


def test_a_text_only_model_is_stalled_with_the_fix_and_nothing_rendered() -> None:
    cr, plan = plan_of("Qwen/Qwen3-8B", {"limitsPerPrompt": {"image": 2}})
    assert [p.reason for p in plan.problems] == ["MultimodalUnsupported"]
    assert "remove serving.multimodal" in plan.problems[0].message
    assert "Qwen/Qwen3-VL-8B-Instruct" in plan.problems[0].message
    assert "--limit-mm-per-prompt" not in engine_args(cr, plan)


def test_a_model_outside_the_catalog_gets_the_flags_unplanned() -> None:
    cr, plan = plan_of("some-org/custom-vl", {"languageModelOnly": True})
    assert not plan.problems
    assert "--language-model-only" in engine_args(cr, plan)

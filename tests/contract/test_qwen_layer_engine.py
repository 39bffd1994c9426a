"""The Qwen layer on the real vLLM CPU engine: the flags the operator renders for a catalogued Qwen model (task,
reranker conversion, parsers, thinking default, YaRN) start the engine and change what it answers.

Each engine serves a tiny Qwen3ForCausalLM (tests/support/tiny_qwen.py, flavour qwen3: Qwen's think and
tool-call tokens, "no"/"yes") from the Deployment rendered for a spec that names the real model, with the
weights on a claim the CPU rule maps to the tiny directory. One engine at a time (2-core machines).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from qwen_fleet.api import QwenInference
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.render import ALL_CAPABILITIES, render_children
from tests.support.cpu_rule import local_process
from tests.support.serving import RenderedServer
from tests.support.tiny_lora import make_tiny_lora
from tests.support.tiny_qwen import TinyQwen, make_tiny_qwen3
from tests.support.vllm_server import free_port

pytestmark = pytest.mark.vllm
NAME = "qwen-layer"
TINY = TinyQwen(kind="qwen3", max_position=32768)  # Qwen3's YaRN original context, so the rendered factor fits


@pytest.fixture(scope="module")
def tiny_qwen3_dir(tmp_path_factory: pytest.TempPathFactory, vllm_python: str) -> Path:
    return make_tiny_qwen3(tmp_path_factory.mktemp("tiny-qwen3"), vllm_python, max_position=TINY.max_position)


def rendered_args(spec: dict[str, Any]) -> tuple[list[str], dict[str, str], list[str]]:
    cr = QwenInference.model_validate({"metadata": {"name": NAME, "namespace": "llm", "uid": "u"}, "spec": spec})
    plan = make_plan(cr, OperatorConfig())
    assert plan.feasible, plan.problems
    deployment = next(c for c in render_children(cr, plan, ALL_CAPABILITIES) if c["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return deployment, container, list(container["args"])


def serve(spec: dict[str, Any], model_dir: Path, python: str, log: Path) -> RenderedServer:
    deployment, _, _ = rendered_args(spec)
    port = free_port()
    local = local_process(deployment, python, {"model": model_dir}, port)
    argv = _adapters_on_disk(local.argv, model_dir)
    return RenderedServer(argv, {**local.env, "VLLM_CPU_KVCACHE_SPACE": "1"}, port=port,
                          served_model_name=NAME, python=python, log_path=log, uniproc=True)


def _adapters_on_disk(argv: list[str], model_dir: Path) -> list[str]:
    """The claim is mounted at /models in the pod; here it is `model_dir`. The CPU rule maps whole path arguments;
    an adapter's path sits inside a --lora-modules JSON entry, so it is mapped here the same way."""
    out = []
    for arg in argv:
        if arg.startswith("{") and '"path": "/models/' in arg:
            entry = json.loads(arg)
            entry["path"] = str(model_dir) + entry["path"].removeprefix("/models")
            out.append(json.dumps(entry))
        else:
            out.append(arg)
    return out


def on_claim(model: str, **spec: Any) -> dict[str, Any]:
    """A spec for catalogued `model` whose weights sit on a claim (the tiny model, here)."""
    return {"model": {"name": model, "source": {"pvc": {"claimName": "models", "path": "/"}}},
            **{"engine": {"maxModelLen": 512, "maxNumSeqs": 4, "dtype": "bfloat16", "shutdownTimeoutSeconds": 5}}
            | spec}


@pytest.fixture(scope="module")
def tiny_qwen3_with_lora(tmp_path_factory: pytest.TempPathFactory, vllm_python: str) -> Path:
    """A claim holding the tiny model at its root and a LoRA adapter for it under adapters/tiny-lora."""
    root = make_tiny_qwen3(tmp_path_factory.mktemp("tiny-qwen3-lora"), vllm_python, max_position=TINY.max_position)
    make_tiny_lora(root / "adapters" / "tiny-lora", vllm_python, TINY, rank=8)
    return root


@pytest.fixture
def engine(request: pytest.FixtureRequest, tiny_qwen3_dir: Path, vllm_python: str,
           tmp_path: Path) -> Iterator[RenderedServer]:
    server = serve(request.param, tiny_qwen3_dir, vllm_python, tmp_path / "vllm.log")
    with server:
        yield server


EMBED_SPEC = on_claim("Qwen/Qwen3-Embedding-0.6B")
RERANK_SPEC = on_claim("Qwen/Qwen3-Reranker-0.6B")
CHAT_SPEC = on_claim("Qwen/Qwen3-8B", serving={"thinking": False},
                     engine={"maxModelLen": 65536, "maxNumSeqs": 4, "dtype": "bfloat16", "shutdownTimeoutSeconds": 5})


def test_the_specs_render_the_qwen_flags() -> None:
    """What the engine tests below start with (so a change of defaults shows here first)."""
    embed = rendered_args(EMBED_SPEC)[2]
    assert embed[embed.index("--runner") + 1] == "pooling" and embed[embed.index("--convert") + 1] == "embed"
    rerank = rendered_args(RERANK_SPEC)[2]
    assert json.loads(rerank[rerank.index("--hf-overrides") + 1])["is_original_qwen3_reranker"] is True
    chat = rendered_args(CHAT_SPEC)[2]
    for flag, value in (("--reasoning-parser", "qwen3"), ("--tool-call-parser", "hermes"),
                        ("--default-chat-template-kwargs", '{"enable_thinking": false}')):
        assert chat[chat.index(flag) + 1] == value
    assert json.loads(chat[chat.index("--hf-overrides") + 1])["rope_parameters"]["factor"] == 2.0


@pytest.mark.parametrize("engine", [EMBED_SPEC], indirect=True, ids=["Qwen3-Embedding"])
def test_embedding_model_answers_embeddings(engine: RenderedServer) -> None:
    status, body = engine.post_json("/v1/embeddings", {"model": NAME, "input": ["hello qwen", "a second text"]})
    assert status == 200, body
    vectors = [d["embedding"] for d in body["data"]]
    assert len(vectors) == 2 and all(len(v) == TINY.hidden for v in vectors)  # last-token pooling, hidden wide
    assert vectors[0] != vectors[1]
    # A pooling engine has no chat: generation is not what it was started for.
    status, _ = engine.post_json("/v1/chat/completions", {"model": NAME, "messages": [
        {"role": "user", "content": "hi"}], "max_tokens": 4})
    assert status != 200


@pytest.mark.parametrize("engine", [RERANK_SPEC], indirect=True, ids=["Qwen3-Reranker"])
def test_reranker_answers_score_and_rerank(engine: RenderedServer) -> None:
    status, body = engine.post_json("/v1/score", {"model": NAME, "text_1": "what is qwen?",
                                                  "text_2": ["a model family", "a kind of tea"]})
    assert status == 200, body
    scores = [d["score"] for d in body["data"]]
    assert len(scores) == 2 and all(0.0 <= s <= 1.0 for s in scores), scores  # softmax over "no"/"yes"
    status, body = engine.post_json("/v1/rerank", {"model": NAME, "query": "what is qwen?",
                                                   "documents": ["a model family", "a kind of tea", "x"]})
    assert status == 200, body
    ranked = [r["relevance_score"] for r in body["results"]]
    assert len(ranked) == 3 and ranked == sorted(ranked, reverse=True)


def chat(server: RenderedServer, **extra: Any) -> tuple[int, Any]:
    return server.post_json("/v1/chat/completions", {
        "model": NAME, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8, "ignore_eos": True,
        "temperature": 0.0, **extra})


@pytest.mark.parametrize("engine", [CHAT_SPEC], indirect=True, ids=["Qwen3-8B-thinking-off-yarn"])
def test_parsers_thinking_default_and_yarn_in_the_engine(engine: RenderedServer) -> None:
    # YaRN: the engine took maxModelLen 65536 on a model whose config says 32768.
    status, models = engine.get("/v1/models")
    assert status == 200 and '"max_model_len":65536' in models.replace(" ", ""), models
    # The thinking default reaches the template: the prompt ends with Qwen3's empty think block.
    status, tokens = engine.post_json("/tokenize", {"model": NAME, "messages": [{"role": "user", "content": "Hi"}],
                                                    "add_generation_prompt": True})
    assert status == 200, tokens
    ids = tokens["tokens"]
    think, end_think = 259, 260  # QWEN3_ADDED_TOKENS' ids in the tiny tokenizer
    assert think in ids and end_think in ids, ids
    # The reasoning parser: thinking off (the default), the answer is content; a request that turns thinking on
    # gets the same random text as reasoning, since the tiny model never closes </think>.
    status, off = chat(engine)
    assert status == 200, off
    message = off["choices"][0]["message"]
    assert message["content"] and not message.get("reasoning"), message
    status, on = chat(engine, chat_template_kwargs={"enable_thinking": True})
    assert status == 200, on
    message = on["choices"][0]["message"]
    assert message.get("reasoning") and not message["content"], message
    # The tool parser and auto tool choice are on: tool_choice "auto" is accepted (400 without them).
    tool = {"type": "function", "function": {"name": "get_weather", "description": "weather",
                                             "parameters": {"type": "object", "properties": {}}}}
    status, body = chat(engine, tools=[tool], tool_choice="auto")
    assert status == 200, body


LORA_SPEC = on_claim("Qwen/Qwen3-8B", serving={"adapters": [{"name": "tiny-lora", "path": "adapters/tiny-lora"}],
                                               "maxLoraRank": 8, "reasoningParser": "none", "toolCallParser": "none"})


def test_a_lora_adapter_made_at_test_time_answers_by_name(tiny_qwen3_with_lora: Path, vllm_python: str,
                                                          tmp_path: Path) -> None:
    with serve(LORA_SPEC, tiny_qwen3_with_lora, vllm_python, tmp_path / "vllm.log") as server:
        status, models = server.get("/v1/models")
        assert status == 200, models
        listed = {m["id"]: m for m in json.loads(models)["data"]}
        assert listed["tiny-lora"]["parent"] == NAME, listed
        base = chat(server)
        tuned = chat(server, model="tiny-lora")
        assert base[0] == 200 and tuned[0] == 200, (base, tuned)
        # Greedy decoding of the same prompt: the adapter's non-zero delta changes the text.
        assert tuned[1]["choices"][0]["message"]["content"] != base[1]["choices"][0]["message"]["content"]
        assert tuned[1]["model"] == "tiny-lora"

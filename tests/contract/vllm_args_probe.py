"""Run under the vLLM venv: parse argument lists with the real vLLM OpenAI server parser of the pinned version.

stdin: a JSON list of argv lists. stdout: a JSON list, per argv either {"error": "..."} or the parsed values
the contract test compares with the spec. Builds the parser once (that is the slow part).
"""

import contextlib
import io
import json
import sys

FIELDS = (
    "model", "revision", "served_model_name", "port", "tensor_parallel_size", "pipeline_parallel_size",
    "max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size", "gpu_memory_utilization", "dtype",
    "quantization", "kv_cache_dtype", "enforce_eager", "enable_prefix_caching", "enable_chunked_prefill",
    "kv_offloading_size", "kv_offloading_backend", "cpu_offload_gb", "scheduling_policy", "trust_remote_code",
    "shutdown_timeout", "runner", "hf_overrides", "convert", "reasoning_parser", "tool_call_parser",
    "enable_auto_tool_choice", "default_chat_template_kwargs", "speculative_config", "enable_lora", "max_loras",
    "max_lora_rank", "lora_modules", "language_model_only", "limit_mm_per_prompt",
)


def check_parser_names(args):
    """The server resolves parser names only at start; resolve them here, from vLLM's own registries."""
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    if args.reasoning_parser:
        ReasoningParserManager.get_reasoning_parser(args.reasoning_parser)
    if args.tool_call_parser:
        ToolParserManager.get_tool_parser(args.tool_call_parser)


def vision_tower_built(args):
    """What vLLM's own rule says of the Qwen3-VL / Qwen3.5 vision tower for these flags: the models build it
    under `_mark_tower_model(vllm_config, {"image", "video"})`, which leaves it out when the config's limit of
    every one of those modalities is 0."""
    from vllm.config.multimodal import MultiModalConfig

    config = MultiModalConfig(language_model_only=args.language_model_only,
                              limit_per_prompt=args.limit_mm_per_prompt or {})
    return not all(config.get_limit_per_prompt(m) == 0 for m in ("image", "video"))


def parse(parser, argv):
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import validate_parsed_serve_args

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = parser.parse_args(argv)
            validate_parsed_serve_args(args)
            AsyncEngineArgs.from_cli_args(args)  # the step the server takes next; types must fit
            check_parser_names(args)
            built = vision_tower_built(args)
    except SystemExit:
        return {"error": err.getvalue().strip().splitlines()[-1] if err.getvalue() else "exit"}
    except Exception as exc:  # reported back to the test
        return {"error": f"{type(exc).__name__}: {exc}"}
    out = {}
    for name in FIELDS:
        value = getattr(args, name, None)
        if name == "lora_modules" and value:  # LoRAModulePath dataclasses
            value = [{"name": m.name, "path": m.path} for m in value]
        if name == "limit_mm_per_prompt":  # the parsed JSON (a dict); {} when the flag is absent
            value = dict(value or {})
        out[name] = value if isinstance(value, (str, int, float, bool, list, dict, type(None))) else str(value)
    out["vision_tower_built"] = built
    return out


def main() -> None:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(description="vLLM OpenAI-Compatible RESTful API server."))
    if "--serve" in sys.argv:  # one JSON argv per line in, one JSON result per line out
        print(json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            print(json.dumps(parse(parser, json.loads(line))), flush=True)
        return
    json.dump([parse(parser, argv) for argv in json.load(sys.stdin)], sys.stdout)


if __name__ == "__main__":
    main()

"""Print the flags of vLLM's OpenAI server parser as JSON: the table ``engine.extraArgs`` is checked against.

Run with the engine's own Python (the venv hack/vllm-venv.sh builds) and VLLM_TARGET_DEVICE=cpu:

    VLLM_TARGET_DEVICE=cpu "$(hack/vllm-venv.sh)" hack/vllm-flags.py > operator/qwen_fleet/catalog/vllm_flags.json

(``make vllm-flags`` does exactly that). The parser is built the way the server's ``main()`` builds it
(``make_arg_parser(FlexibleArgumentParser(...))``), so the table is the server's, not a copy of its docs.
tests/contract/test_vllm_flags.py runs this again and fails when the committed file differs.
"""

import json
import sys


def nargs(action) -> str:
    """How many values the flag takes: "0" (a switch), "1", "?", "+" or "*"."""
    if action.nargs is None:
        return "1"
    return str(action.nargs)


def main() -> None:
    import vllm
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(description="vLLM OpenAI-Compatible RESTful API server."))
    flags = sorted(
        ({"dest": a.dest, "options": sorted(a.option_strings, key=lambda s: (not s.startswith("--"), s)),
          "nargs": nargs(a)} for a in parser._actions if a.option_strings),
        key=lambda f: f["options"][0],
    )
    table = {
        "vllm": vllm.__version__,
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "allowAbbrev": parser.allow_abbrev,
        "flags": flags,
    }
    # One flag a line: a vLLM upgrade shows up in review as the lines of the flags it added or removed.
    head = {k: v for k, v in table.items() if k != "flags"}
    lines = [json.dumps(head)[:-1] + ', "flags": [']
    lines += [" " + json.dumps(f) + ("," if i < len(flags) - 1 else "") for i, f in enumerate(flags)]
    sys.stdout.write("\n".join(lines) + "\n]}\n")


if __name__ == "__main__":
    main()
